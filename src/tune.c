/*
 * tune.c — tuning results: recording a measured candidate of a problem in the cache DB,
 * where select.c finds the winners for the dispatch of later handles.  The measuring
 * itself (qjit_gemm_tune) is in tune_run.c.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdio.h>
#include <string.h>

qjit_status qjit_tune_record(qjit_context *ctx, const qjit_gemm_desc *d,
                             const qjit_tune_measurement *ms)
{
    if (!ctx || !d || !ms || !ms->config)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_tune_record: NULL argument");
    qjit_status st = qjit_gemm_desc_validate(d);
    if (st != QJIT_OK)
        return st;
    char problem[256], config[256], why[512], gpu[64];
    qjit_select_problem_text(d, problem, sizeof problem);
    qjit_desc_text(ms->config, config, sizeof config);
    if (ms->m < 1 || ms->n < 1 || ms->k < 1 || !(ms->us > 0) || ms->us > 1e12)
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_tune_record: %s: m=%lld n=%lld k=%lld us=%g (sizes and the "
                            "time must be positive)",
                            problem, (long long)ms->m, (long long)ms->n, (long long)ms->k, ms->us);
    if (qjit_select_fully_named(d))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT,
                            "qjit_tune_record: %s names its whole configuration: there is "
                            "nothing to tune",
                            problem);
    if (!qjit_select_config_of(ctx, d, QJIT_ARCH_AUTO, ms->config, why, sizeof why))
        return qjit_err_set(QJIT_ERROR_INVALID_ARGUMENT, "qjit_tune_record: '%s' for '%s': %s",
                            config, problem, why);
    const char *who = ms->gpu;
    if (!who || !*who) {
        const qjit_cu_api *cu;
        CUcontext cuctx;
        CUdevice dev;
        int major, minor;
        if ((st = qjit_drv_current(&cu, &cuctx, &dev, &major, &minor)) != QJIT_OK ||
            (st = qjit_drv_device_name(cu, dev, gpu, sizeof gpu)) != QJIT_OK)
            return qjit_err_prefix(st, "qjit_tune_record: no gpu named and no current device");
        who = gpu;
    }
    qjit_tuning_row row = {who,   qjit_arch_name(ms->config->arch), problem,
                           qjit_m_bucket(ms->m), ms->n, ms->k, config, ms->m, ms->us,
                           ms->ok != 0};
    return qjit_cache_put_tuning(ctx->cache, &row);
}
