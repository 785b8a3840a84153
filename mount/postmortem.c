/* mount/postmortem: one log line for a fatal signal (see postmortem.h).
 *
 * The handler runs on the thread that faulted, in any state, so it only
 * uses async-signal-safe calls: the line is built by hand in a stack
 * buffer (no printf), the frames come from backtrace() (warmed up at
 * install: its first call loads libgcc_s and allocates) and
 * backtrace_symbols_fd(), which writes them, one per line, into a pipe
 * made at install; the handler reads them back and joins them with " | "
 * so the report is one line (one write()), never
 * interleaved with other threads' lines.
 *
 * Chaining. The previous action of each signal is saved at install. After
 * the line the handler restores it and returns: a fault (si_code > 0)
 * happens again at once and meets that action (a sanitizer's SEGV report,
 * or the default: death with a core dump); a signal sent by kill(2) or
 * abort(3) (si_code <= 0) is raised again. fs/gather's SIGBUS guard is
 * installed by its first guarded copy (a ragged field's offsets read at
 * open, or the first gather), after us: it keeps our handler as the
 * one it chains to for faults outside a guarded copy, and calls it as a
 * function; then the same restore-and-return ends the process.
 *
 * One report per process: the first thread in writes the line; another
 * thread that faults meanwhile waits (the first one's signal ends the
 * process); the same thread entering again (a fault while reporting, or
 * a chain that leads back here) dies by the default action.
 *
 * State: 'pm' is written once by bfs_postmortem_install, before any
 * handler can run, and only read afterwards; 'reporter' is the one atomic
 * that handlers change. */
#include "mount/postmortem.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_FRAMES 48
#define LINE_BYTES 6144 /* one line, one write() */
#define NFATAL	   5

static const int fatal[NFATAL] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

static struct {
	bool installed;
	int fd;	     /* the log: its file, or stderr */
	int pipe[2]; /* frames: backtrace_symbols_fd -> handler */
	struct sigaction old[NFATAL];
} pm = {.fd = -1, .pipe = {-1, -1}};

static _Atomic pid_t reporter; /* thread writing the line, 0: none */

/* Sanitizer runtimes, when linked (weak: NULL otherwise). */
extern void __sanitizer_set_report_fd(void *fd) __attribute__((weak));
extern void __sanitizer_set_death_callback(void (*cb)(void))
    __attribute__((weak));

struct line {
	char *p;
	size_t len, cap; /* cap leaves room for the final newline */
};

static void put(struct line *l, const char *s)
{
	while (*s && l->len < l->cap)
		l->p[l->len++] = *s++;
}

static void put_num(struct line *l, uint64_t v, unsigned base)
{
	char d[24];
	int n = 0;

	if (base == 16)
		put(l, "0x");
	do {
		d[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (n && l->len < l->cap)
		l->p[l->len++] = d[--n];
}

static const char *sig_name(int sig)
{
	switch (sig) {
	case SIGSEGV:
		return "SIGSEGV";
	case SIGBUS:
		return "SIGBUS";
	case SIGABRT:
		return "SIGABRT";
	case SIGFPE:
		return "SIGFPE";
	case SIGILL:
		return "SIGILL";
	}
	return "?";
}

/* The kernel's reason for a fault, when the code names one. */
static const char *fault_code(int sig, int code)
{
	if (sig == SIGSEGV && code == SEGV_MAPERR)
		return "SEGV_MAPERR";
	if (sig == SIGSEGV && code == SEGV_ACCERR)
		return "SEGV_ACCERR";
	if (sig == SIGBUS && code == BUS_ADRALN)
		return "BUS_ADRALN";
	if (sig == SIGBUS && code == BUS_ADRERR)
		return "BUS_ADRERR";
	if (sig == SIGBUS && code == BUS_OBJERR)
		return "BUS_OBJERR";
	return NULL;
}

/* "fatal signal SIGSEGV (SEGV_MAPERR, address 0x10)" or, for a signal
 * sent by a process, "(sent by pid 12)"; sig 0: a sanitizer's report. */
static void put_cause(struct line *l, int sig, const siginfo_t *si)
{
	const char *code;

	if (!sig) {
		put(l, "sanitizer report (above) ends the process");
		return;
	}
	put(l, "fatal signal ");
	put(l, sig_name(sig));
	if (si->si_code <= 0) {
		put(l, " (sent by pid ");
		put_num(l, (uint64_t)si->si_pid, 10);
		put(l, ")");
		return;
	}
	put(l, " (");
	code = fault_code(sig, si->si_code);
	if (code) {
		put(l, code);
	} else {
		put(l, "code ");
		put_num(l, (uint64_t)si->si_code, 10);
	}
	put(l, ", address ");
	put_num(l, (uint64_t)(uintptr_t)si->si_addr, 16);
	put(l, ")");
}

/* Append frames[0..n) as backtrace_symbols_fd prints them, " | "
 * between them (through the pipe: the function only writes to an fd). */
static void put_frames(struct line *l, void *const *frames, int n)
{
	char buf[LINE_BYTES];
	ssize_t got = 0, r;

	while (read(pm.pipe[0], buf, sizeof(buf)) > 0)
		; /* leftovers of an interrupted report */
	backtrace_symbols_fd(frames, n, pm.pipe[1]);
	while (got < (ssize_t)sizeof(buf) &&
	       (r = read(pm.pipe[0], buf + got, sizeof(buf) - (size_t)got)) > 0)
		got += r;
	while (got > 0 && buf[got - 1] == '\n')
		got--;
	for (ssize_t i = 0; i < got && l->len < l->cap; i++) {
		if (buf[i] == '\n')
			put(l, " | ");
		else
			l->p[l->len++] = buf[i];
	}
}

/* Build and send the line; the frames start at the caller's caller (the
 * signal trampoline: the faulting function is next). Not inlined, so
 * that is a fixed two frames up. */
static __attribute__((noinline)) void report(int sig, const siginfo_t *si)
{
	char buf[LINE_BYTES];
	struct line l = {buf, 0, sizeof(buf) - 1};
	void *frames[MAX_FRAMES];
	int n = backtrace(frames, MAX_FRAMES);

	put(&l, "batchfs[crash]: ");
	put_cause(&l, sig, si);
	put(&l, " in thread ");
	put_num(&l, (uint64_t)syscall(SYS_gettid), 10);
	put(&l, " of pid ");
	put_num(&l, (uint64_t)getpid(), 10);
	put(&l, "; backtrace: ");
	if (n > 2)
		put_frames(&l, frames + 2, n - 2);
	buf[l.len++] = '\n';
	if (write(pm.fd, buf, l.len) < 0) {
		/* nowhere left to report it */
	}
}

/* Give 'sig' the action it had before us and let it act (file comment). */
static void pass_on(int sig, const siginfo_t *si)
{
	for (int i = 0; i < NFATAL; i++)
		if (fatal[i] == sig)
			sigaction(sig, &pm.old[i], NULL);
	if (si->si_code <= 0)
		raise(sig);
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	pid_t self = (pid_t)syscall(SYS_gettid), none = 0;

	if (!atomic_compare_exchange_strong(&reporter, &none, self)) {
		if (none != self)
			for (;;)
				pause(); /* the reporting thread ends us */
		signal(sig, SIG_DFL);
		if (si->si_code <= 0)
			raise(sig);
		return;
	}
	report(sig, si);
	pass_on(sig, si);
}

static void on_sanitizer_death(void)
{
	siginfo_t none;
	pid_t nobody = 0;

	memset(&none, 0, sizeof(none));
	if (atomic_compare_exchange_strong(&reporter, &nobody,
					   (pid_t)syscall(SYS_gettid)))
		report(0, &none);
}

/* True when the environment names a log_path for a sanitizer: its
 * reports already go where someone asked (tests/run.sh's files). */
static bool sanitizer_log_path_set(void)
{
	static const char *const vars[] = {"ASAN_OPTIONS", "TSAN_OPTIONS",
					   "UBSAN_OPTIONS", "LSAN_OPTIONS",
					   "MSAN_OPTIONS"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v && strstr(v, "log_path="))
			return true;
	}
	return false;
}

int bfs_postmortem_install(int fd)
{
	struct sigaction sa;
	void *warm[4];

	if (pm.installed)
		return 0;
	if (fd < 0)
		return -EBADF;
	if (pipe2(pm.pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	pm.fd = fd;
	backtrace(warm, 4);
	if (__sanitizer_set_report_fd && !sanitizer_log_path_set())
		__sanitizer_set_report_fd((void *)(intptr_t)fd);
	if (__sanitizer_set_death_callback)
		__sanitizer_set_death_callback(on_sanitizer_death);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < NFATAL; i++)
		sigaction(fatal[i], &sa, &pm.old[i]);
	pm.installed = true;
	return 0;
}
