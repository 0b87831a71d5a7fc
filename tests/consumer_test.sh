#!/usr/bin/env bash
# Installs this build into a scratch prefix, then configures, builds and runs examples/consumer
# against it with find_package(hfa): what a downstream CMake project does.
set -eu
build=$1; src=$2; cmake=$3
prefix="$build/consumer-test/prefix"
rm -rf "$build/consumer-test"
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
"$cmake" -S "$src" -B "$build/consumer-test/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
"$cmake" --build "$build/consumer-test/build" >/dev/null
"$build/consumer-test/build/hfa_consumer"
