/* remote_probe: fs/remote driven line by line from a test (tests/remote/).
 *
 * Usage: remote_probe [--timeout S] [--stall S] [--max-in-flight N]
 *                     [--s3-endpoint URL] [--ca-file PEM] [--log FILE]
 * reads commands on stdin, answers one JSON line each on stdout:
 *   open URL                  {"ok":1,"id":N,"size":..,"etag":"..",
 *                              "last_modified":"..","name":"..",
 *                              "auth":".."}
 *   read ID OFF LEN OUT       one range, waited for; its bytes written
 *                             into file OUT at OFF: {"ok":1,"tries":N}
 *   reads ID OUT RANGES       every "OFF LEN" line of file RANGES
 *                             submitted at once, each written into OUT at
 *                             its offset as it lands (only when it
 *                             succeeded): {"ok":1,"n":..,"failed":..,
 *                             "errnos":{"EIO":k,..},"msgs":[..]}
 *   stats                     the client's counters
 *   close ID, quit
 * A failure answers {"ok":0,"errno":"ENOENT","msg":".."}. The
 * environment (AWS_*, HOME) is the process's. --log writes every log
 * line, debug included, to FILE. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/remote/remote.h"

#define MAX_OBJS 64

static FILE *log_file;
static struct bfs_remote_obj *objs[MAX_OBJS];

static void log_sink(enum bfs_log_level level, const char *line)
{
	if (log_file) {
		fprintf(log_file, "%s\n", line);
		fflush(log_file);
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static const char *errname(int neg)
{
	switch (-neg) {
	case ENOENT:
		return "ENOENT";
	case EACCES:
		return "EACCES";
	case EIO:
		return "EIO";
	case ETIMEDOUT:
		return "ETIMEDOUT";
	case ESTALE:
		return "ESTALE";
	case EINVAL:
		return "EINVAL";
	case EOPNOTSUPP:
		return "EOPNOTSUPP";
	case ECANCELED:
		return "ECANCELED";
	case ENOMEM:
		return "ENOMEM";
	default:
		return "E?";
	}
}

static void fail(int rc, const char *msg)
{
	printf("{\"ok\":0,\"errno\":\"%s\",\"msg\":", errname(rc));
	json_str(stdout, msg);
	printf("}\n");
}

static struct bfs_remote_obj *obj_arg(const char *s)
{
	long id = strtol(s ? s : "-1", NULL, 10);

	return id >= 0 && id < MAX_OBJS ? objs[id] : NULL;
}

static void cmd_open(struct bfs_remote *r, const char *url)
{
	struct bfs_error err = {{0}};
	struct bfs_remote_info in;
	struct bfs_remote_obj *o;
	int id, rc;

	for (id = 0; id < MAX_OBJS && objs[id]; id++)
		;
	rc = id < MAX_OBJS ? bfs_remote_open(r, url, &o, &err) : -ENOMEM;
	if (rc)
		return fail(rc, err.msg);
	objs[id] = o;
	bfs_remote_obj_info(o, &in);
	printf("{\"ok\":1,\"id\":%d,\"size\":%" PRIu64 ",\"etag\":", id,
	       in.size);
	json_str(stdout, in.etag);
	printf(",\"last_modified\":");
	json_str(stdout, in.last_modified);
	printf(",\"name\":");
	json_str(stdout, in.name);
	printf(",\"auth\":");
	json_str(stdout, in.auth);
	printf("}\n");
}

static void cmd_read(char *args)
{
	struct bfs_error err = {{0}};
	struct bfs_remote_obj *o = obj_arg(strtok(args, " "));
	const char *offs = strtok(NULL, " "), *lens = strtok(NULL, " ");
	const char *out = strtok(NULL, " ");
	uint64_t off;
	size_t len;
	char *buf;
	int rc, fd;

	if (!o || !offs || !lens || !out)
		return fail(-EINVAL, "usage: read ID OFF LEN OUT");
	off = strtoull(offs, NULL, 10);
	len = strtoull(lens, NULL, 10);
	buf = malloc(len ? len : 1);
	rc = bfs_remote_read(o, buf, len, off, &err);
	if (rc) {
		free(buf);
		return fail(rc, err.msg);
	}
	fd = open(out, O_WRONLY | O_CREAT, 0644);
	if (fd < 0 || pwrite(fd, buf, len, (off_t)off) != (ssize_t)len) {
		free(buf);
		return fail(-errno, "cannot write OUT");
	}
	close(fd);
	free(buf);
	printf("{\"ok\":1}\n");
}

/* A batch of ranges landing one by one (callbacks, client's thread). */
struct batch {
	struct bfs_remote *r;
	int fd;
	pthread_mutex_t lock;
	uint64_t failed;
	unsigned by_errno[8];
	char msgs[4][BFS_ERROR_MAX];
	unsigned nmsgs;
};

static const int errnos[8] = {EIO,    ETIMEDOUT, ESTALE, ENOENT,
			      EACCES, ECANCELED, EINVAL, 0};

static void landed(struct bfs_remote_req *req)
{
	struct batch *b = req->arg;

	pthread_mutex_lock(&b->lock);
	if (req->result) {
		int i = 0;

		while (errnos[i] && errnos[i] != -req->result)
			i++;
		b->by_errno[i]++;
		b->failed++;
		if (b->nmsgs < 4)
			snprintf(b->msgs[b->nmsgs++], BFS_ERROR_MAX, "%s",
				 req->err.msg);
	} else if (pwrite(b->fd, req->buf, req->len, (off_t)req->off) !=
		   (ssize_t)req->len) {
		b->failed++;
	}
	pthread_mutex_unlock(&b->lock);
	free(req->buf);
	req->buf = NULL;
}

static void cmd_reads(struct bfs_remote *r, char *args)
{
	struct bfs_remote_obj *o = obj_arg(strtok(args, " "));
	const char *out = strtok(NULL, " "), *ranges = strtok(NULL, " ");
	struct batch b = {.r = r};
	struct bfs_remote_group g;
	struct bfs_remote_req *reqs = NULL;
	size_t n = 0, cap = 0;
	unsigned long long off, len;
	FILE *f;

	if (!o || !out || !ranges || !(f = fopen(ranges, "r")))
		return fail(-EINVAL, "usage: reads ID OUT RANGES");
	while (fscanf(f, "%llu %llu", &off, &len) == 2) {
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			reqs = realloc(reqs, cap * sizeof(*reqs));
		}
		reqs[n++] = (struct bfs_remote_req){
		    .obj = o, .off = off, .len = len, .arg = &b};
	}
	fclose(f);
	b.fd = open(out, O_WRONLY | O_CREAT, 0644);
	pthread_mutex_init(&b.lock, NULL);
	bfs_remote_group_init(&g);
	for (size_t i = 0; i < n; i++) {
		reqs[i].buf = malloc(reqs[i].len);
		reqs[i].done = landed;
		reqs[i].group = &g;
		if (bfs_remote_submit(&reqs[i])) {
			free(reqs[i].buf);
			b.failed++;
		}
	}
	bfs_remote_group_wait(&g);
	bfs_remote_group_destroy(&g);
	close(b.fd);
	printf("{\"ok\":1,\"n\":%zu,\"failed\":%" PRIu64 ",\"errnos\":{", n,
	       b.failed);
	for (int i = 0, first = 1; i < 8; i++)
		if (b.by_errno[i]) {
			printf("%s\"%s\":%u", first ? "" : ",",
			       errnos[i] ? errname(-errnos[i]) : "E?",
			       b.by_errno[i]);
			first = 0;
		}
	printf("},\"msgs\":[");
	for (unsigned i = 0; i < b.nmsgs; i++) {
		printf("%s", i ? "," : "");
		json_str(stdout, b.msgs[i]);
	}
	printf("]}\n");
	pthread_mutex_destroy(&b.lock);
	free(reqs);
}

static void cmd_stats(struct bfs_remote *r)
{
	struct bfs_remote_stats st;

	bfs_remote_stats(r, &st);
	printf("{\"ok\":1,\"requests\":%" PRIu64 ",\"bytes\":%" PRIu64
	       ",\"in_flight\":%" PRIu64 ",\"in_flight_max\":%" PRIu64
	       ",\"queued\":%" PRIu64 ",\"retries\":%" PRIu64
	       ",\"done\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"errors\":{",
	       st.requests, st.bytes, st.in_flight, st.in_flight_max, st.queued,
	       st.retries, st.done, st.failed);
	for (int k = 0; k < BFS_REMOTE_E_KINDS; k++)
		printf("%s\"%s\":%" PRIu64, k ? "," : "",
		       bfs_remote_err_kind_name(k), st.errors[k]);
	printf("}}\n");
}

int main(int argc, char **argv)
{
	struct bfs_remote_opts opts = {0};
	struct bfs_error err = {{0}};
	struct bfs_remote *r;
	char line[16384];
	int rc;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--timeout"))
			opts.timeout_s = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--stall"))
			opts.stall_s = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-in-flight"))
			opts.max_in_flight = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--s3-endpoint"))
			opts.s3_endpoint = argv[i + 1];
		else if (!strcmp(argv[i], "--ca-file"))
			opts.ca_file = argv[i + 1];
		else if (!strcmp(argv[i], "--log"))
			log_file = fopen(argv[i + 1], "a");
		else
			return 2;
	}
	bfs_log_setup(BFS_LOG_DEBUG, log_sink);
	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = bfs_remote_create(&r, &opts, &err);
	if (rc) {
		fail(rc, err.msg);
		return 1;
	}
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "open ", 5))
			cmd_open(r, line + 5);
		else if (!strncmp(line, "read ", 5))
			cmd_read(line + 5);
		else if (!strncmp(line, "reads ", 6))
			cmd_reads(r, line + 6);
		else if (!strcmp(line, "stats"))
			cmd_stats(r);
		else if (!strncmp(line, "close ", 6)) {
			long id = strtol(line + 6, NULL, 10);

			if (id >= 0 && id < MAX_OBJS) {
				bfs_remote_close(objs[id]);
				objs[id] = NULL;
			}
			printf("{\"ok\":1}\n");
		} else if (!strcmp(line, "quit"))
			break;
		else
			fail(-EINVAL, "unknown command");
	}
	for (int i = 0; i < MAX_OBJS; i++)
		bfs_remote_close(objs[i]);
	bfs_remote_destroy(r);
	if (log_file)
		fclose(log_file);
	return 0;
}
