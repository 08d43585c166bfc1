/*
 * driver.h — the CUDA driver entry points qjit uses, resolved from libcuda.so.1 at
 * first GPU use so that compile-only work runs on machines with no driver.
 */
#ifndef QJIT_DRIVER_H
#define QJIT_DRIVER_H

#include "qjit_internal.h"

#include <cuda.h>

struct qjit_cu_api {
    CUresult (*Init)(unsigned);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
    CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*StreamGetCtx)(CUstream, CUcontext *);
    CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemAllocHost)(void **, size_t);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*StreamEndCapture)(CUstream, CUgraph *);
    CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*GraphLaunch)(CUgraphExec, CUstream);
    CUresult (*GraphExecDestroy)(CUgraphExec);
    CUresult (*GraphDestroy)(CUgraph);
    /* NULL where the driver has none (before CUDA 12): TMA kernels then refuse to launch,
     * and cluster_m kernels are not capped by their co-resident clusters */
    CUresult (*OccupancyMaxActiveClusters)(int *, CUfunction, const CUlaunchConfig *);
    CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);
};

/* Set this thread's message to "<what>: CUDA_ERROR_X (description)" and return
 * QJIT_ERROR_CUDA (or QJIT_ERROR_NO_DEVICE for the no-device results). */
QJIT_HIDDEN qjit_status qjit_drv_fail(const qjit_cu_api *cu, CUresult r, const char *what);

/* The CUDA context current on this thread, its device and the device's compute
 * capability.  QJIT_ERROR_NO_DEVICE when no context is current. */
QJIT_HIDDEN qjit_status qjit_drv_current(const qjit_cu_api **cu, CUcontext *cuctx,
                                         CUdevice *dev, int *major, int *minor);
/* The device's name ("NVIDIA H100 80GB HBM3"), the key of tuning results. */
QJIT_HIDDEN qjit_status qjit_drv_device_name(const qjit_cu_api *cu, CUdevice dev, char *buf,
                                             size_t cap);

/* A launch of a handle loaded in `owner` (a context of device dev): refused unless owner
 * is current on this thread and, when stream is a real stream, its context too, so that
 * the error names the devices instead of the driver failing.  Two thread-local queries. */
QJIT_HIDDEN qjit_status qjit_drv_check_context(const qjit_cu_api *cu, CUcontext owner,
                                               CUdevice dev, CUstream stream, const char *what);

/* One launch of f: grid[3] CTAs of `threads` threads and `smem` bytes of dynamic shared
 * memory.  With a cluster shape (cluster[0]·[1]·[2] > 1, or NULL for none) or an early start
 * (pdl: programmatic stream serialization, QJIT_PDL) through cuLaunchKernelEx with those
 * attributes, else cuLaunchKernel.  *what (may be NULL) names the call for an error. */
QJIT_HIDDEN CUresult qjit_drv_launch(const qjit_cu_api *cu, CUfunction f, const unsigned grid[3],
                                     unsigned threads, unsigned smem, CUstream stream,
                                     void **params, const unsigned cluster[3], bool pdl,
                                     const char **what);

#endif
