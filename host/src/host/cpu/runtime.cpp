// xthunk CPU runtime: runs the blocks of a launch on the calling OS thread, each block's GPU
// threads as fibers. Appended after the user source by core/src/host/cpu/build.rs; the
// generated entry table follows it. The Rust side (core/src/host/cpu/program.rs) calls
// xt_cpu_run from each worker of its pool.
//
// Scheduling (per block): a fiber runs GPU threads one after the other, in thread order,
// until one of them reaches a barrier (__syncthreads or a warp operation); only then does
// the scheduler start another fiber for the next thread. A kernel with no barrier therefore
// runs its whole block as one loop on one fiber. Once every thread has started, barriers are
// released when every live (not yet exited) thread of the block (of the warp, for warp
// operations) has arrived; a state where none can be released is a deadlock, reported.
// The kernels' float max/min macros (prelude_cpu.h) end with the kernels.
#undef fmaxf
#undef fminf
#undef fmax
#undef fmin
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

thread_local xt_cpu_state* xt_cpu_cur = nullptr;

#define XT_CPU_ABI 2
#define XT_CPU_MAX_THREADS 1024
#define XT_CPU_MAX_PARAMS 64
#define XT_CPU_STACK (256u * 1024u)

enum xt_cpu_wait { XT_RUNNING = 0, XT_AT_BLOCK = 1, XT_AT_WARP = 2, XT_IDLE = 3 };

struct xt_cpu_worker;
struct xt_cpu_fiber {
  void* sp;
  unsigned char* stack;  // mapping base (guard page first)
  unsigned int tid;
  int wait;
  // The first thread of this fiber's current run whose exit is not yet counted, and whether
  // the running thread parked (after which every thread of the block has been started).
  unsigned int run_start;
  int parked;
  xt_cpu_worker* worker;
#if !defined(__x86_64__)
  ucontext_t uc;
#endif
};

struct xt_cpu_block {
  void (*threads)(void**);  // the kernel's thread loop (xt_cpu_thread_loop<F>)
  void** params;
  unsigned int nthreads, next, exited, at_block;
  unsigned int warps;
  unsigned int warp_arrived[XT_CPU_MAX_THREADS];
  unsigned int warp_exited[XT_CPU_MAX_THREADS];
  unsigned int warp_gen[XT_CPU_MAX_THREADS];
  xt_cpu_fiber* fiber_of[XT_CPU_MAX_THREADS];
  unsigned long long xval[2][XT_CPU_MAX_THREADS];
  unsigned int xgen[2][XT_CPU_MAX_THREADS];
};

struct xt_cpu_worker {
  xt_cpu_state state;
  xt_cpu_block block;
  void* sched_sp;
#if !defined(__x86_64__)
  ucontext_t sched_uc;
#endif
  xt_cpu_fiber* current;
  xt_cpu_fiber* fibers[XT_CPU_MAX_THREADS];
  unsigned int nfibers;
  unsigned char* dyn;
  size_t dyn_size;
  // The first warp fault of the launch on this worker (xt_cpu_warp_fault), reported at its end.
  int faulted;
  char fault[400];
};

// ---- context switch ----------------------------------------------------------------------
#if defined(__x86_64__)
// xt_cpu_switch(void** save, void* to): saves the callee-saved registers on the current
// stack, stores the stack pointer in *save, and resumes `to`. The floating-point control
// state (MXCSR, x87 control word) is not switched: every fiber of a worker shares it, and
// kernels do not change it.
extern "C" void xt_cpu_switch(void** save, void* to);
extern "C" void xt_cpu_fiber_start();
asm(R"(
.text
.p2align 4
.type xt_cpu_switch,@function
xt_cpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size xt_cpu_switch,.-xt_cpu_switch
.p2align 4
.type xt_cpu_fiber_start,@function
xt_cpu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size xt_cpu_fiber_start,.-xt_cpu_fiber_start
)");
#endif

static void xt_cpu_fiber_main(xt_cpu_fiber* f);
#if !defined(__x86_64__)
// ucontext passes no pointer: the fiber about to start is the worker's `current`.
static void xt_cpu_fiber_trampoline() { xt_cpu_fiber_main(((xt_cpu_worker*)xt_cpu_cur)->current); }
#endif

// Prepares `f` to start at xt_cpu_fiber_main on a fresh stack.
static void xt_cpu_fiber_init(xt_cpu_fiber* f) {
#if defined(__x86_64__)
  unsigned long long top = (unsigned long long)(f->stack + XT_CPU_STACK + 4096) & ~15ull;
  unsigned long long* s = (unsigned long long*)top;
  // Layout popped by xt_cpu_switch (from the saved sp up): r15, r14, r13, r12, rbx, rbp,
  // return address; after `ret` the stack pointer is 16-byte aligned.
  s[-2] = 0;                                        // alignment pad at top-16
  s[-3] = (unsigned long long)&xt_cpu_fiber_start;  // return address
  s[-4] = 0;                                        // rbp
  s[-5] = 0;                                        // rbx
  s[-6] = (unsigned long long)f;                    // r12: argument
  s[-7] = (unsigned long long)&xt_cpu_fiber_main;   // r13: function
  s[-8] = 0;                                        // r14
  s[-9] = 0;                                        // r15
  f->sp = &s[-9];
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack + 4096;
  f->uc.uc_stack.ss_size = XT_CPU_STACK;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, xt_cpu_fiber_trampoline, 0);
#endif
}

static void xt_cpu_to_fiber(xt_cpu_worker* w, xt_cpu_fiber* f) {
  w->current = f;
#if defined(__x86_64__)
  xt_cpu_switch(&w->sched_sp, f->sp);
#else
  swapcontext(&w->sched_uc, &f->uc);
#endif
}

static void xt_cpu_to_scheduler(xt_cpu_worker* w, xt_cpu_fiber* f) {
#if defined(__x86_64__)
  xt_cpu_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
}

static inline xt_cpu_worker* xt_cpu_worker_of() { return (xt_cpu_worker*)xt_cpu_cur; }

// Sets the built-in variables for thread `t` of the running block.
static inline void xt_cpu_set_thread(xt_cpu_worker* w, unsigned int t) {
  xt_cpu_state& s = w->state;
  s.tid = t;
  const unsigned int bx = s.block_dim.x, by = s.block_dim.y;
  if (by == 1 && s.block_dim.z == 1) {
    s.thread_idx.x = t;  // y and z are 0 for the whole block (set by xt_cpu_run)
  } else {
    s.thread_idx.x = t % bx;
    s.thread_idx.y = (t / bx) % by;
    s.thread_idx.z = t / (bx * by);
  }
}

// Counts the exits of threads [from, to) (they ran to completion on one fiber).
static inline void xt_cpu_count_exits(xt_cpu_worker* w, unsigned int from, unsigned int to) {
  if (to <= from) return;
  xt_cpu_block& b = w->block;
  b.exited += to - from;
  const unsigned int shift = w->state.warp_size == 64 ? 6 : 5;
  for (unsigned int k = from >> shift; k <= (to - 1) >> shift; k++) {
    const unsigned int lo = k << shift, hi = (k + 1) << shift;
    b.warp_exited[k] += (to < hi ? to : hi) - (from > lo ? from : lo);
  }
}

// Brings the block's bookkeeping up to date before the running thread meets a barrier: the
// threads before it on this fiber have exited, and every later one is still unstarted. The
// thread loop keeps both in registers otherwise.
static inline void xt_cpu_publish(xt_cpu_worker* w) {
  xt_cpu_block& b = w->block;
  xt_cpu_fiber* f = w->current;
  const unsigned int t = w->state.tid;
  if (b.next < t + 1) b.next = t + 1;
  xt_cpu_count_exits(w, f->run_start, t);
  f->run_start = t;
  f->tid = t;
  b.fiber_of[t] = f;
}

// The loop a fiber runs: GPU threads of the block, one after the other, until none is left
// to start. `F` is inlined into it.
template <typename A>
constexpr unsigned int xt_cpu_pointee_align() {
  if constexpr (!std::is_pointer_v<A>) {
    return 0u;
  } else {
    using P = std::remove_cv_t<std::remove_pointer_t<A>>;
    if constexpr (std::is_void_v<P> || std::is_function_v<P>) return 1u;
    else return (unsigned int)alignof(P);
  }
}
template <typename T>
struct xt_cpu_sig;
template <typename... A>
struct xt_cpu_sig<void (*)(A...)> {
  static constexpr unsigned int arity = sizeof...(A);
  // `flatten`: the kernel is inlined into the loop, so a kernel without barriers becomes one
  // loop over the block's threads (the built-ins' thread-local state read once).
  template <void (*F)(A...), size_t... I>
  __attribute__((flatten)) static void loop(void** p, std::index_sequence<I...>) {
    xt_cpu_worker* w = xt_cpu_worker_of();
    xt_cpu_fiber* f = w->current;
    xt_cpu_block& b = w->block;
    const unsigned int n = b.nthreads;
    f->run_start = b.next;
    f->parked = 0;
    for (unsigned int t = b.next; t < n; t++) {
      xt_cpu_set_thread(w, t);
      F(*reinterpret_cast<std::remove_cv_t<A>*>(p[I])...);
      if (f->parked) {
        // Every thread has been started meanwhile (barriers release only then): this
        // fiber's run ends with this thread.
        xt_cpu_count_exits(w, t, t + 1);
        return;
      }
    }
    if (b.next < n) b.next = n;
    xt_cpu_count_exits(w, f->run_start, n);
  }
  // Each parameter's size, and for a pointer its pointee's alignment (0: not a pointer).
  static void sizes(unsigned int* out, unsigned int* pointer) {
    unsigned int s[] = {(unsigned int)sizeof(A)..., 0u};
    unsigned int q[] = {xt_cpu_pointee_align<A>()..., 0u};
    for (unsigned int i = 0; i < arity; i++) {
      out[i] = s[i];
      pointer[i] = q[i];
    }
  }
};
template <auto F>
static void xt_cpu_thread_loop(void** p) {
  using S = xt_cpu_sig<decltype(F)>;
  S::template loop<F>(p, std::make_index_sequence<S::arity>{});
}
template <auto F>
static void xt_cpu_param_sizes(unsigned int* out, unsigned int* pointer) {
  xt_cpu_sig<decltype(F)>::sizes(out, pointer);
}

static void xt_cpu_fiber_main(xt_cpu_fiber* f) {
  xt_cpu_worker* w = f->worker;
  w->block.threads(w->block.params);
  f->wait = XT_IDLE;
  xt_cpu_to_scheduler(w, f);
  // Never resumed: an idle fiber is started afresh by xt_cpu_fiber_init.
  std::abort();
}

// Parks the running fiber at a barrier until the scheduler releases it.
static void xt_cpu_park(xt_cpu_worker* w, int what) {
  xt_cpu_fiber* f = w->current;
  f->wait = what;
  f->parked = 1;
  xt_cpu_to_scheduler(w, f);
}

void xt_cpu_syncthreads() {
  xt_cpu_worker* w = xt_cpu_worker_of();
  xt_cpu_block& b = w->block;
  xt_cpu_publish(w);
  if (b.nthreads - b.exited == 1 && b.next == b.nthreads) return;  // alone in the block
  b.at_block++;
  xt_cpu_park(w, XT_AT_BLOCK);
}

unsigned long long xt_cpu_warp_exchange(unsigned long long mine, int src, int* valid) {
  if (valid) *valid = 0;
  xt_cpu_worker* w = xt_cpu_worker_of();
  xt_cpu_block& b = w->block;
  xt_cpu_publish(w);
  const unsigned int ws = w->state.warp_size;
  const unsigned int t = w->state.tid;
  const unsigned int k = t / ws;
  const unsigned int lane = t % ws;
  const unsigned int first = k * ws;
  const unsigned int last = first + ws < b.nthreads ? first + ws : b.nthreads;
  // Alone in its warp (the others exited, or a warp of one thread): nothing to wait for.
  if (b.next >= last && (last - first) - b.warp_exited[k] == 1) {
    if (valid) *valid = src >= 0 && (unsigned int)src == lane;
    return mine;
  }
  const unsigned int gen = b.warp_gen[k];
  const unsigned int g = gen & 1u;
  b.xval[g][t] = mine;
  b.xgen[g][t] = gen + 1u;  // 0 never matches: slots start zeroed
  b.warp_arrived[k]++;
  xt_cpu_park(w, XT_AT_WARP);
  if (src < 0 || (unsigned int)src >= ws) return mine;
  const unsigned int s = first + (unsigned int)src;
  if (s >= b.nthreads || b.xgen[g][s] != gen + 1u) return mine;
  if (valid) *valid = 1;
  return b.xval[g][s];
}

void xt_cpu_warp_fault(const char* op, const char* why, unsigned long long detail) {
  xt_cpu_worker* w = xt_cpu_worker_of();
  if (w->faulted) return;
  w->faulted = 1;
  const xt_cpu_state& s = w->state;
  std::snprintf(w->fault, sizeof w->fault,
                "%s in block (%u,%u,%u), thread %u (lane %u of a %u-lane warp): %s (0x%llx)", op,
                s.block_idx.x, s.block_idx.y, s.block_idx.z, s.tid, s.tid % s.warp_size, s.warp_size,
                why, detail);
}

// Resumes fiber `f` (restoring its thread's built-ins) until it parks or goes idle.
static void xt_cpu_resume(xt_cpu_worker* w, xt_cpu_fiber* f) {
  f->wait = XT_RUNNING;
  xt_cpu_set_thread(w, f->tid);
  xt_cpu_to_fiber(w, f);
}

static xt_cpu_fiber* xt_cpu_idle_fiber(xt_cpu_worker* w) {
  for (unsigned int i = 0; i < w->nfibers; i++)
    if (w->fibers[i]->wait == XT_IDLE) return w->fibers[i];
  if (w->nfibers >= XT_CPU_MAX_THREADS) return nullptr;
  void* m = mmap(nullptr, XT_CPU_STACK + 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  mprotect(m, 4096, PROT_NONE);  // guard page below the stack
  xt_cpu_fiber* f = new (std::nothrow) xt_cpu_fiber();
  if (!f) {
    munmap(m, XT_CPU_STACK + 4096);
    return nullptr;
  }
  f->stack = (unsigned char*)m;
  f->wait = XT_IDLE;
  f->worker = w;
  w->fibers[w->nfibers++] = f;
  return f;
}

static int xt_cpu_fail(char* err, size_t errlen, const char* msg) {
  std::snprintf(err, errlen, "%s", msg);
  return 1;
}

// Runs one block to completion.
static int xt_cpu_block_run(xt_cpu_worker* w, char* err, size_t errlen) {
  xt_cpu_block& b = w->block;
  for (;;) {
    if (b.next < b.nthreads) {
      xt_cpu_fiber* f = xt_cpu_idle_fiber(w);
      if (!f) return xt_cpu_fail(err, errlen, "cannot map a fiber stack for another GPU thread");
      xt_cpu_fiber_init(f);
      f->wait = XT_RUNNING;
      xt_cpu_to_fiber(w, f);
      continue;
    }
    if (b.exited == b.nthreads) return 0;
    bool progressed = false;
    const unsigned int ws = w->state.warp_size;
    xt_cpu_fiber* ready[XT_CPU_MAX_THREADS];
    for (unsigned int k = 0; k < b.warps; k++) {
      const unsigned int first = k * ws;
      const unsigned int last = first + ws < b.nthreads ? first + ws : b.nthreads;
      const unsigned int live = (last - first) - b.warp_exited[k];
      if (b.warp_arrived[k] == 0 || b.warp_arrived[k] != live) continue;
      unsigned int n = 0;
      for (unsigned int t = first; t < last; t++) {
        xt_cpu_fiber* f = b.fiber_of[t];
        if (f && f->wait == XT_AT_WARP && f->tid == t) ready[n++] = f;
      }
      if (n != live) continue;  // some lanes wait at __syncthreads: not released
      b.warp_arrived[k] = 0;
      b.warp_gen[k]++;
      for (unsigned int i = 0; i < n; i++) xt_cpu_resume(w, ready[i]);
      progressed = true;
    }
    if (progressed) continue;
    if (b.at_block > 0 && b.at_block == b.nthreads - b.exited) {
      unsigned int n = 0;
      for (unsigned int t = 0; t < b.nthreads; t++) {
        xt_cpu_fiber* f = b.fiber_of[t];
        if (f && f->wait == XT_AT_BLOCK && f->tid == t) ready[n++] = f;
      }
      b.at_block = 0;
      for (unsigned int i = 0; i < n; i++) xt_cpu_resume(w, ready[i]);
      continue;
    }
    std::snprintf(err, errlen,
                  "deadlock in block (%u, %u, %u): %u of %u threads wait at __syncthreads, the other "
                  "live ones at warp operations their warp cannot complete (divergent barrier)",
                  w->state.block_idx.x, w->state.block_idx.y, w->state.block_idx.z, b.at_block,
                  b.nthreads - b.exited);
    return 1;
  }
}

// ---- the interface to Rust ---------------------------------------------------------------
struct xt_cpu_run_args {
  unsigned int abi;
  unsigned int entry;
  void** params;
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
  unsigned int warp_size;
  unsigned long long* next_block;  // shared by every worker of the launch
  unsigned long long total_blocks;
  unsigned int* failed;  // set by the first worker that fails: the others stop
};

struct xt_cpu_entry {
  const char* name;
  void (*threads)(void**);
  void (*sizes)(unsigned int*, unsigned int*);
  const void* address;
  unsigned int arity;
  unsigned int flags;  // XT_CPU_EACH: a kernel marked XT_EACH_KERNEL
};
#define XT_CPU_EACH 1u

extern "C" const xt_cpu_entry xt_cpu_entries[];
extern "C" const unsigned int xt_cpu_entry_count;

extern "C" __attribute__((visibility("default"))) unsigned int xt_cpu_abi() { return XT_CPU_ABI; }

extern "C" __attribute__((visibility("default"))) unsigned int xt_cpu_count() { return xt_cpu_entry_count; }

// Entry i's flags (XT_CPU_EACH), 0 for an index out of range.
extern "C" __attribute__((visibility("default"))) unsigned int xt_cpu_entry_flags(unsigned int i) {
  return i < xt_cpu_entry_count ? xt_cpu_entries[i].flags : 0u;
}

// Entry `i`: its source name, its address (for the symbol name), its arity, and for each
// parameter its size and whether it is a pointer (`sizes` and `pointer` hold 64).
extern "C" __attribute__((visibility("default"))) int xt_cpu_entry_info(unsigned int i, const char** name,
                                                                         const void** address,
                                                                         unsigned int* arity,
                                                                         unsigned int* sizes,
                                                                         unsigned int* pointer) {
  if (i >= xt_cpu_entry_count) return 1;
  const xt_cpu_entry& e = xt_cpu_entries[i];
  if (e.arity > XT_CPU_MAX_PARAMS) return 2;
  *name = e.name;
  *address = e.address;
  *arity = e.arity;
  e.sizes(sizes, pointer);
  return 0;
}

// The calling OS thread's scheduler state, freed (with its fiber stacks) when the thread exits.
struct xt_cpu_worker_holder {
  xt_cpu_worker* w = nullptr;
  ~xt_cpu_worker_holder() {
    if (!w) return;
    for (unsigned int i = 0; i < w->nfibers; i++) {
      munmap(w->fibers[i]->stack, XT_CPU_STACK + 4096);
      delete w->fibers[i];
    }
    std::free(w->dyn);
    delete w;
  }
};
static thread_local xt_cpu_worker_holder xt_cpu_worker_slot;

// Runs blocks of one launch, claiming them from `next_block`, until none is left or another
// worker failed. 0 on success; otherwise `err` says why.
extern "C" __attribute__((visibility("default"))) int xt_cpu_run(const xt_cpu_run_args* r, char* err,
                                                                  size_t errlen) {
  if (r->abi != XT_CPU_ABI) return xt_cpu_fail(err, errlen, "runtime ABI mismatch");
  if (r->entry >= xt_cpu_entry_count) return xt_cpu_fail(err, errlen, "no such kernel entry");
  if (r->block[0] > XT_CPU_MAX_THREADS || r->block[1] > XT_CPU_MAX_THREADS || r->block[2] > XT_CPU_MAX_THREADS)
    return xt_cpu_fail(err, errlen, "a block must have 1 to 1024 threads");
  const unsigned long long nt = (unsigned long long)r->block[0] * r->block[1] * r->block[2];
  if (nt == 0 || nt > XT_CPU_MAX_THREADS)
    return xt_cpu_fail(err, errlen, "a block must have 1 to 1024 threads");
  if (r->warp_size != 32 && r->warp_size != 64)
    return xt_cpu_fail(err, errlen, "the warp size must be 32 or 64");
  xt_cpu_worker* w = xt_cpu_worker_slot.w;
  if (!w) {
    w = new (std::nothrow) xt_cpu_worker();
    if (!w) return xt_cpu_fail(err, errlen, "out of memory for the worker state");
    xt_cpu_worker_slot.w = w;
  }
  if (w->dyn_size < r->shared_bytes) {
    std::free(w->dyn);
    size_t sz = ((size_t)r->shared_bytes + 63) & ~(size_t)63;
    w->dyn = (unsigned char*)std::aligned_alloc(64, sz);
    w->dyn_size = w->dyn ? sz : 0;
    if (!w->dyn) return xt_cpu_fail(err, errlen, "out of memory for dynamic shared memory");
  }
  w->faulted = 0;
  xt_cpu_state* saved = xt_cpu_cur;
  xt_cpu_cur = &w->state;
  xt_cpu_state& s = w->state;
  s.block_dim = {r->block[0], r->block[1], r->block[2]};
  s.grid_dim = {r->grid[0], r->grid[1], r->grid[2]};
  s.warp_size = r->warp_size;
  s.dynamic_shared = w->dyn;
  s.block = &w->block;
  const xt_cpu_entry& e = xt_cpu_entries[r->entry];
  int rc = 0;
  for (;;) {
    if (__atomic_load_n(r->failed, __ATOMIC_RELAXED)) break;
    unsigned long long id = __atomic_fetch_add(r->next_block, 1ull, __ATOMIC_RELAXED);
    if (id >= r->total_blocks) break;
    const unsigned long long gx = r->grid[0], gy = r->grid[1];
    s.block_idx = {(unsigned int)(id % gx), (unsigned int)((id / gx) % gy), (unsigned int)(id / (gx * gy))};
    xt_cpu_block& b = w->block;
    b.threads = e.threads;
    b.params = r->params;
    b.nthreads = (unsigned int)nt;
    s.thread_idx = {0, 0, 0};
    b.next = 0;
    b.exited = 0;
    b.at_block = 0;
    b.warps = (b.nthreads + r->warp_size - 1) / r->warp_size;
    for (unsigned int k = 0; k < b.warps; k++) {
      b.warp_arrived[k] = 0;
      b.warp_exited[k] = 0;
      b.warp_gen[k] = 0;
    }
    std::memset(b.xgen[0], 0, sizeof(unsigned int) * nt);
    std::memset(b.xgen[1], 0, sizeof(unsigned int) * nt);
    for (unsigned int i = 0; i < w->nfibers; i++) w->fibers[i]->wait = XT_IDLE;
    rc = xt_cpu_block_run(w, err, errlen);
    if (rc == 0 && w->faulted) rc = xt_cpu_fail(err, errlen, w->fault);
    if (rc != 0) {
      __atomic_store_n(r->failed, 1u, __ATOMIC_RELAXED);
      break;
    }
  }
  // Fibers left parked by a failure are simply started afresh next time.
  for (unsigned int i = 0; i < w->nfibers; i++) w->fibers[i]->wait = XT_IDLE;
  xt_cpu_cur = saved;
  return rc;
}

#define XT_CPU_ENTRY(name, fn) \
  { name, &xt_cpu_thread_loop<fn>, &xt_cpu_param_sizes<fn>, (const void*)fn, xt_cpu_sig<decltype(fn)>::arity, \
    xt_cpu_each_kernel<fn>::value ? XT_CPU_EACH : 0u }
