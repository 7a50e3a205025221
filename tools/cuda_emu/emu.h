// Host emulation of the CUDA subset that src/ops/adamw/adamw_lowmem.cu's step kernel uses, so that the kernel's own
// source (copied by adamw8_emu.sh, the asm approximations swapped for libm) runs on a machine without a GPU, and the
// launch helper the other emulations use (GDN v2 kernels, the decode warp kernel, the GEMV's SwiGLU epilogue). IEEE
// host arithmetic for the _rn intrinsics (volatile results, and the builds use -ffp-contract=off, so nothing is
// fused). Warp collectives (__reduce_max_sync, the shuffles, __syncwarp, and the tensor-core primitives of
// emu_mma.h) go through the warp's barrier and exchange buffer: every lane of the warp must call them together (full
// masks only). Not emulated: memory ordering beyond the barriers, flush-to-zero of the approx functions (the kernel
// uses them only for a search's starting point).
// Execution: the CUDA threads of a block run as FIBERS on the calling host thread (x86-64: a 20-instruction stack
// switch, emu_switch below; each fiber has its own 1-MiB stack under a guard page), a barrier being a point where a
// fiber yields until every thread it waits for has arrived; blocks run one after another. The scheduler runs a block
// warp by warp (each warp as far as its block barriers let it: its lanes pass their warp barriers together), in
// ascending and descending order on alternate sweeps, consecutive blocks starting in opposite directions, so that of
// two threads that touch the same memory between two block barriers (a missing barrier: one runs both halves before
// the other starts) each runs first in some block; it stops the program with a message when a sweep makes no
// progress (threads waiting at barriers that cannot complete). Session 32 replaced
// the former thread-per-CUDA-thread launch (std::thread + std::barrier; still the fallback on other architectures):
// on 2 cores it spent most of its time switching 128-256 host threads at every barrier (gdn_fwd_emu: 100 s wall,
// 110 s of system time, 44M involuntary context switches).
#pragma once
#include <barrier>
#include <cmath>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <cstdio>
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
struct uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct Dim { unsigned x = 0, y = 0, z = 0; };
inline thread_local Dim threadIdx, blockIdx;
inline Dim gridDim, blockDim;
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { volatile float r = 1.0f / a; return r; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline int __float2int_rn(float f) { if (std::isnan(f)) return 0; return (int)std::nearbyint(f); }
#ifndef HLM_EMU_FMAF_RN  // also in stubs/cuda_runtime.h (either may come first)
#define HLM_EMU_FMAF_RN
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }  // one rounding, as on the GPU
#endif
// PRMT's default mode: byte i of the result is byte (s >> 4i) & 7 of the pair {x (bytes 0-3), y (bytes 4-7)}.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t pair = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((pair >> (8 * ((s >> (4 * i)) & 7))) & 0xFFu) << (8 * i);
  return r;
}
using std::isfinite;
// CUDA's integer min/max overloads (same-type arguments).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }

// ---- Fibers and barriers
#if defined(__x86_64__) && !defined(HLM_EMU_THREADS)
#define HLM_EMU_FIBERS 1
#include <sys/mman.h>
// emu_switch(from, to): saves the callee-saved registers, MXCSR and the x87 control word on the current stack,
// stores the stack pointer in *from, switches to the stack `to` and restores what that stack saved (System V ABI:
// every other register is caller-saved, so the compiler keeps nothing else live across the call).
extern "C" void emu_switch(void** from, void* to);
asm(R"(
  .text
  .weak emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");
struct EmuFiber {
  void* sp = nullptr;          // saved stack pointer while switched out
  char* mapping = nullptr;     // guard page + stack (emu_fiber_stacks' pool)
  bool done = false;
  unsigned thread = 0;
};
inline void* g_emu_sched_sp;           // the scheduler's stack pointer while a fiber runs
inline EmuFiber* g_emu_fiber;          // the fiber running now
inline uint64_t g_emu_progress;        // barrier completions and finished fibers (the deadlock check)
inline uint64_t g_emu_blocks_run;      // blocks run by the process: consecutive ones start in opposite directions
inline std::function<void()>* g_emu_body;
inline void emu_yield() { emu_switch(&g_emu_fiber->sp, g_emu_sched_sp); }
[[noreturn]] inline void emu_fiber_entry() {
  (*g_emu_body)();
  g_emu_fiber->done = true;
  emu_yield();
  std::abort();  // a finished fiber is never resumed
}
// A barrier for `expected` fibers: the last to arrive completes the phase and goes on; the others yield until then.
struct EmuBarrier {
  explicit EmuBarrier(int n) : expected(n) {}
  void arrive_and_wait() {
    const uint64_t mine = phase;
    if (++arrived == expected) {
      arrived = 0;
      ++phase;
      ++g_emu_progress;
      return;
    }
    while (phase == mine) emu_yield();
  }
  int expected, arrived = 0;
  uint64_t phase = 0;
};
#else
struct EmuBarrier {  // threads: std::barrier
  explicit EmuBarrier(int n) : bar(n) {}
  void arrive_and_wait() { bar.arrive_and_wait(); }
  std::barrier<> bar;
};
#endif
inline EmuBarrier* g_block_barrier;
inline void __syncthreads() { g_block_barrier->arrive_and_wait(); }
struct WarpX { std::unique_ptr<EmuBarrier> bar; uint32_t vals[32]; uint64_t xch[32][12]; };
inline WarpX* g_warps;
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  WarpX& w = g_warps[threadIdx.x / 32];
  w.vals[threadIdx.x % 32] = v;
  w.bar->arrive_and_wait();
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) m = m > w.vals[l] ? m : w.vals[l];
  w.bar->arrive_and_wait();
  return m;
}
// Shuffles: lane l reads lane src(l) (its own value when src is out of range, as on the GPU for up/down).
template <class T, class Src> T emu_shfl(T v, Src src) {
  static_assert(sizeof(T) <= 8, "shuffle of a register-sized value");
  WarpX& w = g_warps[threadIdx.x / 32];
  const int l = static_cast<int>(threadIdx.x % 32);
  std::memcpy(&w.xch[l][11], &v, sizeof(T));
  w.bar->arrive_and_wait();
  const int from = src(l);
  T r;
  std::memcpy(&r, &w.xch[from >= 0 && from < 32 ? from : l][11], sizeof(T));
  w.bar->arrive_and_wait();
  return r;
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, [m](int l) { return l ^ m; }); }
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d) { return emu_shfl(v, [d](int l) { return l - (int)d; }); }
template <class T> T __shfl_down_sync(unsigned, T v, unsigned d) { return emu_shfl(v, [d](int l) { return l + (int)d; }); }
template <class T> T __shfl_sync(unsigned, T v, int s) { return emu_shfl(v, [s](int) { return s & 31; }); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_warps[threadIdx.x / 32].bar->arrive_and_wait(); }
enum cudaMemcpyKind { cudaMemcpyHostToDevice };
template <class T> int cudaMemcpyToSymbol(T& sym, const void* src, size_t bytes) { std::memcpy(&sym, src, bytes); return 0; }

// ---- Launch helper: blocks run one after another, each with `threads` CUDA threads (a multiple of 32), its own
// barriers and `smem_bytes` of zeroed dynamic shared memory, which the kernel reaches through emu_dyn_smem (the
// emulation scripts put it in place of `extern __shared__ ... smem[]`).
#include <thread>
#include <vector>
#define __align__(n) alignas(n)
inline thread_local char* emu_dyn_smem;
#if HLM_EMU_FIBERS
// One stack per thread, kept for the process (every launch reuses them; mapped lazily: only the pages a fiber touches
// cost memory), each kEmuStack bytes above a PROT_NONE page, so that an overflow faults instead of overwriting the
// neighbour. At least `threads` of them.
inline constexpr size_t kEmuGuard = 4096, kEmuStack = size_t{1} << 20;
inline const std::vector<char*>& emu_fiber_stacks(unsigned threads) {
  static std::vector<char*> stacks;
  while (stacks.size() < threads) {
    void* m = mmap(nullptr, kEmuGuard + kEmuStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED || mprotect(m, kEmuGuard, PROT_NONE) != 0) {
      std::fprintf(stderr, "emu_launch: no stack for thread %zu\n", stacks.size());
      std::abort();
    }
    stacks.push_back(static_cast<char*>(m));
  }
  return stacks;
}
#endif
template <class F>
void emu_launch(Dim grid, unsigned threads, size_t smem_bytes, F&& body) {
  if (threads % 32 != 0) std::abort();
  gridDim = {grid.x, grid.y ? grid.y : 1, grid.z ? grid.z : 1};
  blockDim = {threads, 1, 1};
  std::vector<char> smem_buf(smem_bytes + 128);
  char* smem = smem_buf.data() + (128 - reinterpret_cast<uintptr_t>(smem_buf.data()) % 128) % 128;
#if HLM_EMU_FIBERS
  const std::vector<char*>& stacks = emu_fiber_stacks(threads);
  std::vector<EmuFiber> fibers(threads);
  for (unsigned t = 0; t < threads; ++t) {
    fibers[t].mapping = stacks[t];
    fibers[t].thread = t;
  }
  std::function<void()> run = body;
  g_emu_body = &run;
#endif
  for (unsigned z = 0; z < gridDim.z; ++z)
    for (unsigned y = 0; y < gridDim.y; ++y)
      for (unsigned x = 0; x < gridDim.x; ++x) {
        std::memset(smem, 0, smem_bytes);
        EmuBarrier block_bar(static_cast<int>(threads));
        g_block_barrier = &block_bar;
        std::vector<WarpX> warps(threads / 32);
        for (auto& w : warps) w.bar = std::make_unique<EmuBarrier>(32);
        g_warps = warps.data();
#if HLM_EMU_FIBERS
        // Each fiber's first switch "returns" into emu_fiber_entry: its stack holds the entry as the return address
        // (16-byte aligned top, so the entry sees the ABI's alignment), six zero registers and this thread's MXCSR and
        // x87 control word, as emu_switch leaves a stack.
        uint32_t csr[2] = {0, 0};
        asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
        for (EmuFiber& f : fibers) {
          auto* top = reinterpret_cast<uint64_t*>(f.mapping + kEmuGuard + kEmuStack);
          top[-1] = 0;  // the entry's (never used) return address
          top[-2] = reinterpret_cast<uint64_t>(&emu_fiber_entry);
          for (int r = 3; r <= 8; ++r) top[-r] = 0;
          top[-9] = static_cast<uint64_t>(csr[0]) | (static_cast<uint64_t>(csr[1] & 0xFFFFu) << 32);
          f.sp = top - 9;
          f.done = false;
        }
        unsigned remaining = threads;
        const uint64_t first = g_emu_blocks_run++;
        const unsigned n_warps = threads / 32;
        for (uint64_t sweep = first; remaining > 0; ++sweep) {
          const uint64_t before = g_emu_progress;
          const bool up = sweep % 2 == 0;
          // Warp by warp: a warp's lanes run, passing their warp barriers together, until none of them gets further
          // (all at a block barrier, or finished), before the next warp starts; so warps drift as far apart as the
          // block barriers let them, and a read of another warp's data that lacks its block barrier sees it unwritten
          // in one of the two orders.
          for (unsigned wi = 0; wi < n_warps; ++wi) {
            const unsigned w = up ? wi : n_warps - 1 - wi;
            for (;;) {
              const uint64_t warp_before = g_emu_progress;
              for (unsigned li = 0; li < 32; ++li) {
                EmuFiber& f = fibers[32 * w + (up ? li : 31 - li)];
                if (f.done) continue;
                threadIdx = {f.thread, 0, 0};
                blockIdx = {x, y, z};
                emu_dyn_smem = smem;
                g_emu_fiber = &f;
                emu_switch(&g_emu_sched_sp, f.sp);
                if (f.done) {
                  --remaining;
                  ++g_emu_progress;
                }
              }
              if (g_emu_progress == warp_before) break;
            }
          }
          if (remaining > 0 && g_emu_progress == before) {
            std::fprintf(stderr, "emu_launch: block (%u, %u, %u): %u threads wait at barriers that cannot complete "
                         "(a barrier not reached by every thread it counts)\n", x, y, z, remaining);
            std::abort();
          }
        }
#else
        std::vector<std::thread> th;
        for (unsigned t = 0; t < threads; ++t)
          th.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            blockIdx = {x, y, z};
            emu_dyn_smem = smem;
            body();
          });
        for (auto& t : th) t.join();
#endif
      }
}
