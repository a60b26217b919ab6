/*
 * refit: the offline plan (include/refit/session.h, rf_session_offline_*): what
 * rf_session_plan agrees for a topology, computed in one process without its ranks, for
 * refit-plan and for planning a job before it starts.
 *
 * The same steps as a session's, in the same functions: the files read and parsed as
 * rf_session_create's rank 0 reads them (rf_model_load_topology_local), the inventory and
 * rollout layout, the format owner open_rollout picks, the manifest trainer rank 0 builds and
 * every rank validates (rf_manifest_build / rf_manifest_validate, no checkpoint), then per
 * rollout rank what build_rollout does over storage reserved instead of registered
 * (rf_plan_alloc_storage with MAP_NORESERVE: the same slots, so the same decisions) in the
 * topology's plan form (broadcast, or p2p's sender-keyed rectangles), and the plan hash
 * through the session's own rf_session_decisions_hash / rf_session_plan_hash. No MPI call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/formats.h"
#include "refit/p2p.h"
#include "session_int.h"

static _Thread_local char open_err[RF_ERR_MSG_MAX];

struct rf_session_offline {
    rf_topology_t topo;
    rf_model_config_t cfg;
    rf_inventory_t inv;
    bool inv_ok;
    rf_manifest_t man;
    rf_format_t fmt;
    rf_reload_policy_t policy;
    int T, R;
    rf_session_offline_desc_t desc;
    rf_session_rank_plan_t *ranks; /* [R] rollout rank T + j's plan, once planned */
    bool *planned;                 /* [R] */
    rf_err_t err;
};

void rf_session_offline_close(rf_session_offline_t *o)
{
    if (o == NULL)
        return;
    rf_manifest_free(&o->man);
    if (o->inv_ok)
        rf_inventory_free(&o->inv);
    rf_model_config_free(&o->cfg);
    free(o->ranks);
    free(o->planned);
    free(o);
}

static rf_status_t offline_open(rf_session_offline_t *o, const char *topology,
                                const rf_session_options_t *options, const char *format_owner,
                                rf_err_t *err)
{
    RF_CHECK(rf_model_load_topology_local(topology, &o->topo, &o->cfg, err));
    o->T = rf_topology_trainer_size(&o->topo);
    o->R = rf_topology_rollout_size(&o->topo);
    rf_status_t st = rf_inventory_build(&o->cfg, o->topo.quantization, o->topo.group_size,
                                        &o->inv, err);
    o->inv_ok = st == RF_OK;
    RF_CHECK(st);
    RF_CHECK(rf_inventory_apply_layout(&o->inv, o->topo.r_layout, err));
    o->fmt.ops = format_owner ? rf_format_lookup(format_owner)
                              : rf_format_for(o->topo.quantization, (int)o->topo.r_backend);
    if (o->fmt.ops == NULL && format_owner != NULL)
        return rf_err_set(err, RF_ERR_INVALID, "format owner '%s' is not registered",
                          format_owner);
    if (o->fmt.ops == NULL)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: no format owner for quantization %s on "
                          "backend %s",
                          o->topo.file, rf_quant_name(o->topo.quantization),
                          rf_backend_name(o->topo.r_backend));
    o->fmt.quant = o->topo.quantization;
    o->fmt.backend = (int)o->topo.r_backend;
    o->fmt.accel = NULL; /* runtime storage reserved on the host: decisions read signatures */
    o->policy = options != NULL && options->layerwise ? RF_POLICY_LAYERWISE : RF_POLICY_AUTO;
    RF_CHECK(rf_manifest_build(&o->inv, &o->topo, NULL, NULL, &o->man, err));
    RF_CHECK(rf_manifest_validate(&o->man, &o->inv, &o->topo, err));
    o->ranks = calloc((size_t)o->R + 1, sizeof(*o->ranks));
    o->planned = calloc((size_t)o->R + 1, sizeof(bool));
    if (o->ranks == NULL || o->planned == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "offline plan: out of memory");
    o->desc = (rf_session_offline_desc_t){
        .name = o->topo.name,
        .model_type = o->cfg.model_type,
        .architecture = o->cfg.architecture,
        .model_layers = (int)o->cfg.num_hidden_layers,
        .tensors = o->inv.ntensors,
        .elements = o->inv.nparams,
        .quantization = rf_quant_name(o->topo.quantization),
        .backend = rf_backend_name(o->topo.r_backend),
        .format_owner = o->fmt.ops->name,
        .trainer_ranks = o->T,
        .rollout_ranks = o->R,
        .mode = rf_mode_name(o->topo.mode),
    };
    return RF_OK;
}

rf_status_t rf_session_offline_open(const char *topology, const rf_session_options_t *options,
                                    const char *format_owner, rf_session_offline_t **o_p)
{
    rf_err_t err;
    rf_err_clear(&err);
    open_err[0] = '\0';
    if (o_p == NULL) {
        snprintf(open_err, sizeof(open_err), "rf_session_offline_open: NULL o_p");
        return RF_ERR_INVALID;
    }
    *o_p = NULL;
    rf_session_offline_t *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        snprintf(open_err, sizeof(open_err), "rf_session_offline_open: out of memory");
        return RF_ERR_NOMEM;
    }
    rf_status_t st = offline_open(o, topology, options, format_owner, &err);
    if (st != RF_OK) {
        snprintf(open_err, sizeof(open_err), "%s", err.msg);
        rf_session_offline_close(o);
        return st;
    }
    *o_p = o;
    return RF_OK;
}

const rf_session_offline_desc_t *rf_session_offline_describe(const rf_session_offline_t *o)
{
    return o != NULL ? &o->desc : NULL;
}

const char *rf_session_offline_last_error(const rf_session_offline_t *o)
{
    return o != NULL ? o->err.msg : open_err;
}

/* p2p: what each trainer rank sends this rollout rank of a tensor (session_setup.c's
 * p2p_senders, with the receiver passed in). */
typedef struct {
    const rf_session_offline_t *o;
    int rank;
} offline_rank_t;

static int offline_senders(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    const offline_rank_t *c = ctx;
    return rf_p2p_senders(&c->o->topo, &c->o->inv, c->rank, tensor, snd, rect, max);
}

/* build_rollout's steps over reserved storage, and the numbers refit-plan prints. */
static rf_status_t plan_one(rf_session_offline_t *o, int rank, rf_session_rank_plan_t *out,
                            rf_err_t *err)
{
    rf_rank_info_t info;
    rf_storage_t st;
    rf_plan_t plan;
    memset(out, 0, sizeof(*out));
    rf_topology_rank_info(&o->topo, rank, &info);
    RF_CHECK(rf_inventory_check_rollout(&o->inv, &info.rc, err));
    RF_CHECK(rf_storage_init(&st, o->inv.nmodules, err));
    rf_status_t s = rf_plan_alloc_storage(&o->inv, &info.rc, &o->fmt, &st, true, err);
    if (s != RF_OK) {
        rf_storage_free(&st);
        return s;
    }
    offline_rank_t ctx = {o, rank};
    s = o->topo.mode == RF_MODE_P2P
            ? rf_plan_build_p2p(&plan, &o->inv, &info.rc, &st, &o->fmt, o->policy,
                                offline_senders, &ctx, err)
            : rf_plan_build(&plan, &o->inv, &info.rc, &st, &o->fmt, o->policy, err);
    if (s != RF_OK) {
        rf_storage_free(&st);
        return s;
    }
    for (int i = 0; i < o->man.n && s == RF_OK; i++) /* rf_session_build's, after the manifest */
        s = rf_plan_set_source_dtype(&plan, o->man.entries[i].tensor, o->man.entries[i].dtype,
                                     err);
    if (s == RF_OK && rf_session_decisions_hash(&plan, &out->hash) != RF_OK)
        s = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", rank);
    if (s == RF_OK) {
        uint64_t declined = 0;
        for (int a = 0; a < plan.napps; a++)
            declined += plan.apps[a].declined;
        out->rank = rank;
        out->engine = info.engine;
        out->tp_rank = info.rc.tp_rank;
        out->dp_rank = info.rc.dp_rank;
        out->ep_rank = info.rc.ep_rank;
        out->nlayers = plan.nlayers;
        memcpy(out->layers, plan.stats.layers, sizeof(out->layers));
        out->applications = (uint64_t)plan.napps - declined;
        out->declined = declined;
        out->storage_bytes = st.bytes;
    }
    rf_plan_free(&plan);
    rf_storage_free(&st);
    return s;
}

rf_status_t rf_session_offline_plan_rank(rf_session_offline_t *o, int rank,
                                         rf_session_rank_plan_t *out)
{
    if (o == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&o->err);
    if (out == NULL || rank < o->T || rank >= o->T + o->R)
        return rf_err_set(&o->err, RF_ERR_INVALID, "rf_session_offline_plan_rank: %s (rollout "
                          "ranks of %s: %d .. %d)",
                          out == NULL ? "NULL out" : "not a rollout rank", o->topo.name, o->T,
                          o->T + o->R - 1);
    int j = rank - o->T;
    if (!o->planned[j]) {
        RF_CHECK(plan_one(o, rank, &o->ranks[j], &o->err));
        o->planned[j] = true;
    }
    *out = o->ranks[j];
    return RF_OK;
}

rf_status_t rf_session_offline_plan(rf_session_offline_t *o, rf_session_plan_info_t *info)
{
    if (o == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&o->err);
    if (info == NULL)
        return rf_err_set(&o->err, RF_ERR_INVALID, "rf_session_offline_plan: NULL info");
    int size = o->T + o->R;
    uint64_t *hashes = calloc((size_t)size + 1, sizeof(uint64_t)); /* trainer ranks: 0 */
    uint8_t *narrowed = calloc((size_t)o->man.n + 1, 1);          /* no F32 masters */
    if (hashes == NULL || narrowed == NULL) {
        free(hashes);
        free(narrowed);
        return rf_err_set(&o->err, RF_ERR_NOMEM, "rf_session_offline_plan: out of memory");
    }
    rf_session_plan_info_t in;
    memset(&in, 0, sizeof(in));
    rf_status_t st = RF_OK;
    for (int j = 0; j < o->R && st == RF_OK; j++) {
        rf_session_rank_plan_t rp;
        st = rf_session_offline_plan_rank(o, o->T + j, &rp);
        if (st != RF_OK)
            break;
        for (int k = 0; k < 3; k++)
            in.layers[k] += rp.layers[k];
        hashes[o->T + j] = rp.hash;
    }
    if (st == RF_OK && rf_session_plan_hash(rf_topology_hash(&o->topo), o->man.digest, narrowed,
                                            o->man.n, hashes, size, &in.hash) != RF_OK)
        st = rf_err_set(&o->err, RF_ERR_NOMEM, "rf_session_offline_plan: out of memory");
    free(hashes);
    free(narrowed);
    if (st != RF_OK)
        return st;
    in.manifest_digest = o->man.digest;
    in.tensors = o->man.n;
    in.payload_bytes = o->man.payload_bytes;
    in.narrowed = 0;
    *info = in;
    return RF_OK;
}
