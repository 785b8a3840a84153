/* mount/postmortem: the daemon's last words. A fatal signal (SIGSEGV,
 * SIGBUS outside fs/dataset's gather guard, SIGABRT, SIGFPE, SIGILL) or a
 * sanitizer's fatal report leaves one line in the daemon's log before the
 * process dies:
 *
 *   batchfs[crash]: fatal signal SIGSEGV (SEGV_MAPERR, address 0x10) in
 *   thread 4242 of pid 4240; backtrace: batchfs(bfs_pool_acquire+0x4d)
 *   [0x55d0c1a2b3c4] | ...
 *
 * (one line; frames as backtrace_symbols_fd prints them, "|" between
 * them; `addr2line -f -e batchfs +OFFSET` resolves static functions). */
#ifndef BFS_POSTMORTEM_H
#define BFS_POSTMORTEM_H

/* Install the handlers. The line goes to 'fd' (the daemon's log file, or
 * stderr in the foreground). A sanitizer runtime linked into the program
 * sends its reports there too, unless its *_OPTIONS name a log_path (the
 * test runner's).
 * After the line, the signal takes the action it had before (a chained
 * handler, a sanitizer's report, or the default: death and a core dump).
 * Call once, before the FUSE loop serves requests; the descriptor must
 * stay open. Returns 0 or -errno (the handlers are then not installed;
 * -EBADF for fd < 0). */
int bfs_postmortem_install(int fd);

#endif
