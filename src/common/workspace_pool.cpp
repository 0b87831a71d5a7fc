// hfa's workspace memory pools (workspace_pool.h), one per device, created on first use and kept
// for the process's life (destroying them at exit could race the CUDA runtime's own teardown).
#include "common/workspace_pool.h"

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status_util.h"
#include "hfa/hfa.h"

namespace hfa {
namespace {

std::mutex pools_mutex;
std::vector<cudaMemPool_t> pools;  // by device; null until first used

// The pool of `device`, created (release threshold: unlimited) if `create`; null if none.
cudaError_t pool_of(int device, bool create, cudaMemPool_t* pool) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr && create) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    if (cudaError_t err = cudaMemPoolCreate(&created, &props); err != cudaSuccess) return err;
    uint64_t keep_all = UINT64_MAX;
    if (cudaError_t err = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep_all);
        err != cudaSuccess) {
      cudaMemPoolDestroy(created);
      return err;
    }
    pools[device] = created;
  }
  *pool = pools[device];
  return cudaSuccess;
}

// The current device's pool for the public calls (`what` names the call), null when hfa has made
// none there; without a usable device, kNoDevice as forward() says it (and no sticky CUDA error).
Status current_pool(const char* what, cudaMemPool_t* pool) {
  *pool = nullptr;
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    cudaGetLastError();
    return make_error(StatusCode::kNoDevice, "%s: no usable CUDA device: %s", what, cudaGetErrorString(err));
  }
  return cuda_status(pool_of(device, /*create=*/false, pool), what);
}

}  // namespace

cudaError_t workspace_alloc(void** ptr, size_t bytes, cudaStream_t stream) {
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  cudaMemPool_t pool = nullptr;
  if (cudaError_t err = pool_of(device, /*create=*/true, &pool); err != cudaSuccess) return err;
  return cudaMallocFromPoolAsync(ptr, bytes, pool, stream);
}

cudaError_t workspace_free(void* ptr, cudaStream_t stream) { return cudaFreeAsync(ptr, stream); }

Status workspace_memory_reserved(size_t* bytes) {
  *bytes = 0;
  cudaMemPool_t pool = nullptr;
  HFA_RETURN_IF_ERROR(current_pool("workspace_memory_reserved", &pool));
  if (pool == nullptr) return Status::Ok();
  uint64_t reserved = 0;
  HFA_RETURN_IF_ERROR(cuda_status(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
                                  "workspace_memory_reserved: reading the pool"));
  *bytes = static_cast<size_t>(reserved);
  return Status::Ok();
}

Status release_workspace_memory() {
  cudaMemPool_t pool = nullptr;
  HFA_RETURN_IF_ERROR(current_pool("release_workspace_memory", &pool));
  if (pool == nullptr) return Status::Ok();
  return cuda_status(cudaMemPoolTrimTo(pool, 0), "release_workspace_memory: trimming the pool");
}

}  // namespace hfa
