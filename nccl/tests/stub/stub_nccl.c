/* A stand-in for libnccl.so.2 with the header's ABI, for testing xthunk's communicator logic
 * (locking, waiting on ncclInProgress, aborts, groups, freeing) without a GPU. Every call is
 * counted; the test reads the counters and sets the outcomes through the stub_* functions.
 * Built by tests/stub.rs with the C compiler; STUB_VERSION is set with -D. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STUB_VERSION
#define STUB_VERSION 23203
#endif

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { size_t size; unsigned int magic; unsigned int version; int blocking; } cfg_t;
struct ncclComm { int rank, nranks, blocking, pending; long long magic; };
typedef struct ncclComm *ncclComm_t;

enum { C_INIT, C_INITCFG, C_ABORT, C_DESTROY, C_FINALIZE, C_SPLIT, C_ALLREDUCE, C_ALLGATHER,
       C_REDUCESCATTER, C_BROADCAST, C_SEND, C_RECV, C_GSTART, C_GEND, C_POLL, C_LIVE,
       C_BADCOMM, C_N };
static const char *names[C_N] = {"init", "initcfg", "abort", "destroy", "finalize", "split",
    "allreduce", "allgather", "reducescatter", "broadcast", "send", "recv", "group_start",
    "group_end", "poll", "live", "bad_comm"};
static long long counters[C_N];
static int async_state = 0;    /* what ncclCommGetAsyncError reports once ready */
static int op_result = 0;      /* what every operation returns */
static int pending_polls = 0;  /* polls in progress after a non-blocking call */
static int group_depth = 0;
static int group_end_result = 0; /* what ncclGroupEnd returns when balanced */
static long long last[16];     /* last operation: send, recv, count, type, op, root/peer, comm, stream */
static char seq[4096];         /* "s0 r0 s1 r1 ..." for sends and receives */
static cfg_t last_cfg;
#define MAGIC 0x5eed5eedLL

long long stub_counter(const char *name) {
    for (int i = 0; i < C_N; i++) if (!strcmp(names[i], name)) return counters[i];
    return -1;
}
long long stub_last(int i) { return last[i]; }
const char *stub_seq(void) { return seq; }
void stub_set(int async, int op, int pending) { async_state = async; op_result = op; pending_polls = pending; }
void stub_set_group_end(int r) { group_end_result = r; }
long long stub_cfg(int i) {
    if (i == 0) return (long long)last_cfg.size;
    if (i == 1) return last_cfg.magic;
    if (i == 2) return last_cfg.version;
    return last_cfg.blocking;
}
void stub_reset(void) { memset(counters, 0, sizeof counters); memset(last, 0, sizeof last); seq[0] = 0; async_state = 0; op_result = 0; pending_polls = 0; group_depth = 0; group_end_result = 0; }

static int ok(ncclComm_t c) {
    if (!c || c->magic != MAGIC) { counters[C_BADCOMM]++; return 0; }
    return 1;
}
static ncclComm_t make(int rank, int nranks, int blocking) {
    ncclComm_t c = calloc(1, sizeof *c);
    c->rank = rank; c->nranks = nranks; c->blocking = blocking; c->magic = MAGIC;
    c->pending = blocking ? 0 : pending_polls;
    counters[C_LIVE]++;
    return c;
}
static ncclResult_t release(ncclComm_t c) {
    if (!ok(c)) return 4;
    c->magic = 0; free(c); counters[C_LIVE]--;
    return 0;
}
static ncclResult_t op(ncclComm_t c, int which, long long count, int type, int redop, int rp, void *stream) {
    if (!ok(c)) return 4;
    counters[which]++;
    last[2] = count; last[3] = type; last[4] = redop; last[5] = rp; last[6] = (long long)(size_t)c; last[7] = (long long)(size_t)stream;
    if (op_result) return op_result;
    if (!c->blocking && pending_polls) { c->pending = pending_polls; return 7; }
    return 0;
}

ncclResult_t ncclGetVersion(int *v) { *v = STUB_VERSION; return 0; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { memset(id->internal, 7, sizeof id->internal); return 0; }
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
    counters[C_INIT]++;
    if (id.internal[0] != 7 || id.internal[127] != 7) return 4;
    if (op_result) return op_result;
    *comm = make(rank, n, 1);
    return 0;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int n, ncclUniqueId id, int rank, cfg_t *cfg) {
    counters[C_INITCFG]++;
    memcpy(&last_cfg, cfg, sizeof last_cfg);
    if (cfg->magic != 0xcafebeef || cfg->size < 24) return 4;
    if (id.internal[0] != 7) return 4;
    if (op_result) return op_result;
    *comm = make(rank, n, cfg->blocking);
    return cfg->blocking || !pending_polls ? 0 : 7;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *st) {
    if (!ok(c)) return 4;
    counters[C_POLL]++;
    if (c->pending > 0) { c->pending--; *st = 7; } else *st = async_state;
    return 0;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { counters[C_ABORT]++; return release(c); }
ncclResult_t ncclCommDestroy(ncclComm_t c) { counters[C_DESTROY]++; return release(c); }
ncclResult_t ncclCommFinalize(ncclComm_t c) { return op(c, C_FINALIZE, 0, 0, 0, 0, 0); }
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *nc, cfg_t *cfg) {
    if (!ok(c)) return 4;
    counters[C_SPLIT]++;
    if (cfg) return 4; /* xthunk passes NULL: inherit */
    if (op_result) return op_result;
    *nc = color == -1 ? NULL : make(key, c->nranks, c->blocking);
    if (*nc && !c->blocking && pending_polls) { c->pending = pending_polls; return 7; }
    return 0;
}
ncclResult_t ncclCommCount(ncclComm_t c, int *n) { if (!ok(c)) return 4; *n = c->nranks; return 0; }
ncclResult_t ncclCommUserRank(ncclComm_t c, int *r) { if (!ok(c)) return 4; *r = c->rank; return 0; }
const char *ncclGetErrorString(ncclResult_t r) { return r ? "stub error" : "no error"; }
const char *ncclGetLastError(ncclComm_t c) { (void)c; return "stub last error"; }
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int o, ncclComm_t c, void *st) {
    last[0] = (long long)(size_t)s; last[1] = (long long)(size_t)r; return op(c, C_ALLREDUCE, n, t, o, 0, st);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) {
    last[0] = (long long)(size_t)s; last[1] = (long long)(size_t)r; return op(c, C_ALLGATHER, n, t, -1, 0, st);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int o, ncclComm_t c, void *st) {
    last[0] = (long long)(size_t)s; last[1] = (long long)(size_t)r; return op(c, C_REDUCESCATTER, n, t, o, 0, st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, void *st) {
    last[0] = (long long)(size_t)s; last[1] = (long long)(size_t)r; return op(c, C_BROADCAST, n, t, -1, root, st);
}
static void note(char kind, int peer, const void *buf) {
    size_t l = strlen(seq);
    if (l + 40 < sizeof seq) snprintf(seq + l, sizeof seq - l, "%s%c%d@%llx", l ? " " : "", kind, peer, (unsigned long long)(size_t)buf);
}
ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, void *st) {
    if (ok(c)) note('s', peer, s);
    last[0] = (long long)(size_t)s; return op(c, C_SEND, n, t, -1, peer, st);
}
ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, void *st) {
    if (ok(c)) note('r', peer, r);
    last[1] = (long long)(size_t)r; return op(c, C_RECV, n, t, -1, peer, st);
}
ncclResult_t ncclGroupStart(void) { counters[C_GSTART]++; group_depth++; return 0; }
ncclResult_t ncclGroupEnd(void) { counters[C_GEND]++; group_depth--; return group_depth < 0 ? 5 : group_end_result; }
