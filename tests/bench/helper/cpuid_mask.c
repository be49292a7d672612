/* Makes a process see an AVX2-only CPU: preloaded (LD_PRELOAD), it turns on
 * the kernel's CPUID faulting for the process and answers every CPUID
 * instruction itself, with the real answer less the AVX-512, AMX and
 * AVX-VNNI bits. Every library in the process then picks the kernels it
 * would pick on an AVX2 machine - oneDNN, onnxruntime's MLAS (which has no
 * switch of its own), OpenVINO, torch, numpy and our own activation clones -
 * on the same cores, caches and memory. A benchmark tool, not part of the
 * library: tests/bench/as_avx2.py builds and preloads it.
 *
 * Linux on x86-64 only, and only where the CPU (or the hypervisor) offers
 * CPUID faulting (the "cpuid_fault" flag). Where it does not, nothing is
 * changed and cpuid_mask_active() says 0, so the launcher refuses to run.
 *
 * A faulting CPUID arrives as SIGSEGV with si_code SI_KERNEL at the
 * instruction (0F A2). The handler runs the real CPUID with faulting off for
 * that moment (the setting is per thread), masks the answer, writes it to the
 * saved registers and steps over the instruction. Any other SIGSEGV goes to
 * the handler the program installed: sigaction() and signal() for SIGSEGV
 * are intercepted so that a later handler (Python's faulthandler, say) is
 * chained behind this one instead of replacing it. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn real_sigaction;
static struct sigaction chained; /* the program's own SIGSEGV handler */
static int active;
static volatile long answered; /* CPUIDs answered, for the launcher's checks */

static int cpuid_faulting(int faulting) {
    /* ARCH_SET_CPUID: 1 lets CPUID run, 0 makes it fault */
    return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, faulting ? 0 : 1);
}

/* What an AVX2-only x86-64 CPU answers: no AVX-512 (any subset), no AMX, no
 * AVX-VNNI or AVX512-BF16. Leaf 7 is the only leaf that names them. */
static void mask(uint32_t leaf, uint32_t subleaf, uint32_t r[4]) {
    if (leaf == 7 && subleaf == 0) {
        /* EBX: AVX512F, DQ, IFMA, PF, ER, CD, BW, VL */
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
                  (1u << 30) | (1u << 31));
        /* ECX: AVX512_VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ */
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: AVX512_4VNNIW, 4FMAPS, VP2INTERSECT, AMX_BF16, AVX512_FP16,
         * AMX_TILE, AMX_INT8 */
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) |
                  (1u << 25));
    } else if (leaf == 7 && subleaf == 1) {
        /* EAX: AVX_VNNI, AVX512_BF16 */
        r[0] &= ~((1u << 4) | (1u << 5));
    }
}

static void forward(int sig, siginfo_t *info, void *context) {
    if ((chained.sa_flags & SA_SIGINFO) && chained.sa_sigaction) {
        chained.sa_sigaction(sig, info, context);
        return;
    }
    if (!(chained.sa_flags & SA_SIGINFO) && chained.sa_handler != SIG_DFL &&
        chained.sa_handler != SIG_IGN) {
        chained.sa_handler(sig);
        return;
    }
    /* No handler of the program's: the default action. A fault re-runs the
     * instruction and ends the process; a signal sent by someone is sent
     * again. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
    if (info->si_code <= 0) raise(SIGSEGV);
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        forward(sig, info, context);
        return;
    }
    const uint32_t leaf = (uint32_t)regs[REG_RAX], subleaf = (uint32_t)regs[REG_RCX];
    uint32_t r[4];
    cpuid_faulting(0);
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(subleaf));
    cpuid_faulting(1);
    mask(leaf, subleaf, r);
    regs[REG_RAX] = r[0];
    regs[REG_RBX] = r[1];
    regs[REG_RCX] = r[2];
    regs[REG_RDX] = r[3];
    regs[REG_RIP] += 2;
    __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED);
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGSEGV || !active) return real_sigaction(sig, act, old);
    if (old) *old = chained;
    if (act) chained = *act;
    return 0;
}

/* glibc's signal() installs through its own sigaction, past the one above. */
sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
    return old.sa_handler;
}

/* 1 while every CPUID in the process is masked. */
int cpuid_mask_active(void) { return active; }

/* How many CPUID instructions the process has run so far (each one a trap:
 * a library that ran one per call would be slowed here, not on a real
 * AVX2 CPU). */
long cpuid_mask_answered(void) { return __atomic_load_n(&answered, __ATOMIC_RELAXED); }

/* EBX of CPUID leaf 7 as the process sees it (bit 16: AVX512F). */
unsigned cpuid_mask_leaf7_ebx(void) {
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    return b;
}

__attribute__((constructor)) static void start(void) {
    real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (real_sigaction(SIGSEGV, &sa, &chained) != 0) return;
    /* Threads made from here on inherit the setting; execve clears it, and
     * the preload then sets it again in the new program. */
    if (cpuid_faulting(1) != 0) {
        real_sigaction(SIGSEGV, &chained, NULL);
        fprintf(stderr, "cpuid_mask: this CPU or kernel has no CPUID faulting; nothing masked\n");
        return;
    }
    active = 1;
}
