/*
 * driver.c — loads libcuda.so.1 lazily, once, and resolves the entry points qjit uses.
 */
#include "driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static qjit_cu_api api;
static qjit_status load_status = QJIT_ERROR_NO_DEVICE;
static char load_msg[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_msg, sizeof load_msg,
                 "the CUDA driver (libcuda.so.1) could not be loaded: %s", e ? e : "?");
        return;
    }
    static const struct {
        const char *sym;
        size_t off;
    } syms[] = {
#define SYM(field, name) {name, offsetof(qjit_cu_api, field)}
        SYM(Init, "cuInit"),
        SYM(GetErrorName, "cuGetErrorName"),
        SYM(GetErrorString, "cuGetErrorString"),
        SYM(CtxGetCurrent, "cuCtxGetCurrent"),
        SYM(CtxGetDevice, "cuCtxGetDevice"),
        SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
        SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
        SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
        SYM(ModuleLoadData, "cuModuleLoadData"),
        SYM(ModuleUnload, "cuModuleUnload"),
        SYM(ModuleGetFunction, "cuModuleGetFunction"),
        SYM(FuncSetAttribute, "cuFuncSetAttribute"),
        SYM(FuncGetAttribute, "cuFuncGetAttribute"),
        SYM(LaunchKernel, "cuLaunchKernel"),
        SYM(StreamIsCapturing, "cuStreamIsCapturing"),
        SYM(StreamGetCtx, "cuStreamGetCtx"),
        SYM(LaunchKernelEx, "cuLaunchKernelEx"),
        SYM(DeviceGetName, "cuDeviceGetName"),
        /* the tuner's timing and checking (tune.c) */
        SYM(MemAlloc, "cuMemAlloc_v2"),
        SYM(MemFree, "cuMemFree_v2"),
        SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
        SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
        SYM(MemcpyDtoD, "cuMemcpyDtoD_v2"),
        SYM(MemAllocHost, "cuMemAllocHost_v2"),
        SYM(MemFreeHost, "cuMemFreeHost"),
        SYM(MemsetD8, "cuMemsetD8_v2"),
        SYM(StreamCreate, "cuStreamCreate"),
        SYM(StreamDestroy, "cuStreamDestroy_v2"),
        SYM(StreamSynchronize, "cuStreamSynchronize"),
        SYM(EventCreate, "cuEventCreate"),
        SYM(EventDestroy, "cuEventDestroy_v2"),
        SYM(EventRecord, "cuEventRecord"),
        SYM(EventSynchronize, "cuEventSynchronize"),
        SYM(EventElapsedTime, "cuEventElapsedTime_v2"),
        SYM(StreamBeginCapture, "cuStreamBeginCapture_v2"),
        SYM(StreamEndCapture, "cuStreamEndCapture"),
        SYM(GraphInstantiate, "cuGraphInstantiateWithFlags"),
        SYM(GraphLaunch, "cuGraphLaunch"),
        SYM(GraphExecDestroy, "cuGraphExecDestroy"),
        SYM(GraphDestroy, "cuGraphDestroy"),
#undef SYM
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(lib, syms[i].sym);
        if (!f) {
            snprintf(load_msg, sizeof load_msg, "libcuda.so.1 has no %s", syms[i].sym);
            return; /* keep the library loaded: harmless, and dlclose races are worse */
        }
        memcpy((char *)&api + syms[i].off, &f, sizeof f);
    }
    /* optional: the TMA kernels' tensor maps (gemm.c) */
    void *encode = dlsym(lib, "cuTensorMapEncodeTiled");
    memcpy(&api.TensorMapEncodeTiled, &encode, sizeof encode);
    void *clusters = dlsym(lib, "cuOccupancyMaxActiveClusters");
    memcpy(&api.OccupancyMaxActiveClusters, &clusters, sizeof clusters);
    void *blocks = dlsym(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    memcpy(&api.OccupancyMaxActiveBlocksPerMultiprocessor, &blocks, sizeof blocks);
    CUresult r = api.Init(0);
    if (r != CUDA_SUCCESS) {
        const char *n = "?";
        api.GetErrorName(r, &n);
        snprintf(load_msg, sizeof load_msg, "cuInit failed: %s", n);
        return;
    }
    load_status = QJIT_OK;
}

qjit_status qjit_drv_load(const qjit_cu_api **out)
{
    pthread_once(&load_once, load);
    if (load_status != QJIT_OK) {
        *out = NULL;
        return qjit_err_set(load_status, "%s", load_msg);
    }
    *out = &api;
    return QJIT_OK;
}

const char *qjit_drv_error_name(qjit_cu_result r)
{
    const char *n = NULL;
    if (load_status != QJIT_OK || api.GetErrorName((CUresult)r, &n) != CUDA_SUCCESS || !n)
        return "CUDA_ERROR_UNKNOWN";
    return n;
}

qjit_status qjit_drv_fail(const qjit_cu_api *cu, CUresult r, const char *what)
{
    const char *n = "CUDA_ERROR_UNKNOWN", *d = "";
    if (cu) {
        cu->GetErrorName(r, &n);
        cu->GetErrorString(r, &d);
    }
    qjit_status st = (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_INVALID_CONTEXT)
                         ? QJIT_ERROR_NO_DEVICE
                         : QJIT_ERROR_CUDA;
    return qjit_err_set(st, "%s: %s (%s)", what, n ? n : "?", d ? d : "");
}

qjit_status qjit_drv_current(const qjit_cu_api **cu, CUcontext *cuctx, CUdevice *dev,
                             int *major, int *minor)
{
    qjit_status st = qjit_drv_load(cu);
    if (st != QJIT_OK)
        return st;
    CUresult r = (*cu)->CtxGetCurrent(cuctx);
    if (r != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuCtxGetCurrent");
    if (!*cuctx)
        return qjit_err_set(QJIT_ERROR_NO_DEVICE,
                            "no CUDA context is current on this thread (make one current, e.g. "
                            "cudaSetDevice + cudaFree(0), before qjit_get_gemm)");
    if ((r = (*cu)->CtxGetDevice(dev)) != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuCtxGetDevice");
    if ((r = (*cu)->DeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                       *dev)) != CUDA_SUCCESS ||
        (r = (*cu)->DeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                       *dev)) != CUDA_SUCCESS)
        return qjit_drv_fail(*cu, r, "cuDeviceGetAttribute(compute capability)");
    return QJIT_OK;
}

qjit_status qjit_drv_device_name(const qjit_cu_api *cu, CUdevice dev, char *buf, size_t cap)
{
    CUresult r = cu->DeviceGetName(buf, (int)cap, dev);
    if (r != CUDA_SUCCESS)
        return qjit_drv_fail(cu, r, "cuDeviceGetName");
    buf[cap - 1] = 0;
    return QJIT_OK;
}

qjit_status qjit_drv_check_context(const qjit_cu_api *cu, CUcontext owner, CUdevice dev,
                                   CUstream stream, const char *what)
{
    CUcontext cur = NULL;
    if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur != owner) {
        CUdevice cdev = -1;
        if (!cur || cu->CtxGetDevice(&cdev) != CUDA_SUCCESS)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "%s: no CUDA context is current on this thread; the handle "
                                "belongs to a context of device %d",
                                what, (int)dev);
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "%s: the handle belongs to a CUDA context of device %d, but the "
                            "current context is %s of device %d; get the descriptor's handle "
                            "with that context current",
                            what, (int)dev, cdev == dev ? "another" : "one", (int)cdev);
    }
    if (stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD) {
        CUcontext sc = NULL;
        if (cu->StreamGetCtx(stream, &sc) == CUDA_SUCCESS && sc && sc != owner)
            return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                                "%s: the stream belongs to another CUDA context than the "
                                "handle's (device %d)",
                                what, (int)dev);
    }
    return QJIT_OK;
}

CUresult qjit_drv_launch(const qjit_cu_api *cu, CUfunction f, const unsigned grid[3],
                         unsigned threads, unsigned smem, CUstream stream, void **params,
                         const unsigned cluster[3], bool pdl, const char **what)
{
    const bool clustered = cluster && cluster[0] * cluster[1] * cluster[2] > 1;
    if (!clustered && !pdl) {
        if (what)
            *what = "cuLaunchKernel";
        return cu->LaunchKernel(f, grid[0], grid[1], grid[2], threads, 1, 1, smem, stream, params,
                                NULL);
    }
    CUlaunchAttribute attr[2];
    unsigned nattr = 0;
    memset(attr, 0, sizeof attr);
    if (clustered) {
        attr[nattr].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr[nattr].value.clusterDim.x = cluster[0];
        attr[nattr].value.clusterDim.y = cluster[1];
        attr[nattr].value.clusterDim.z = cluster[2];
        nattr++;
    }
    if (pdl) {
        attr[nattr].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[nattr].value.programmaticStreamSerializationAllowed = 1;
        nattr++;
    }
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0];
    cfg.gridDimY = grid[1];
    cfg.gridDimZ = grid[2];
    cfg.blockDimX = threads;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.hStream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = nattr;
    if (what)
        *what = clustered ? "cuLaunchKernelEx (cluster)" : "cuLaunchKernelEx (early start)";
    return cu->LaunchKernelEx(&cfg, f, params, NULL);
}
