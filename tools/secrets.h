/* tools/secrets: a URL's secrets and the AWS secret keys out of what other
 * processes see of this one. */
#ifndef BFS_TOOLS_SECRETS_H
#define BFS_TOOLS_SECRETS_H

/* Called first thing in main. Every argument that holds a URL with a
 * user:password or a query string (a presigned signature) is copied to
 * the heap, argv[i] pointed at the copy, and the original, in the block
 * the kernel shows as /proc/PID/cmdline, overwritten with '*' where the
 * secrets were; AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and
 * AWS_SECURITY_TOKEN likewise in the block /proc/PID/environ shows (the
 * variables keep their values, setenv's copies). A mount's daemon is a
 * fork of this process: it shows what this one does. */
void bfs_hide_secrets(int argc, char **argv);

#endif
