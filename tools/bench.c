/* batchfs bench: the C half of the side-by-side benchmark.
 *
 * Measures what Python cannot measure without adding its own overhead:
 *   --read PATH...      read files (directories: their regular files, in
 *                       version order, so batch_2 comes before batch_10)
 *                       with BS-byte read() calls into one reused
 *                       page-aligned buffer;
 *   --pagecache FILE... the same, after one untimed warm-up read, so the
 *                       timed read is served from the page cache;
 *   --memcpy BYTES      one single-threaded memcpy of BYTES between two
 *                       buffers that were touched (and copied once) before;
 *   --rows SOURCE...    every sample's rows of a dataset in a random order,
 *                       one pread each, from --threads threads, or from
 *                       one thread keeping --depth reads in flight on an
 *                       io_uring (tools/bench_rows.c): the disk's
 *                       random-read limit for those rows.
 * Each repetition prints one line of key=value pairs, e.g.
 *   read bytes=1073741824 seconds=0.161022 GB/s=6.668 files=4096 bs=1048576
 * (GB = 10^9 bytes), which tools/bench/bench.py parses. Timed regions
 * include open() and close() but not directory listing or allocation.
 *
 * Everything here is single-threaded (--rows' threads are
 * tools/bench_rows.c's) and owns no state beyond one call. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench_rows.h"
#include "tools/cli.h"
#include "tools/cmd.h"

struct paths {
	char **v;
	size_t n, cap;
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: batchfs bench [--bs BYTES] [--repeat N] --read PATH...\n"
	    "       batchfs bench [--bs BYTES] [--repeat N] --pagecache "
	    "FILE...\n"
	    "       batchfs bench [--repeat N] --memcpy BYTES\n"
	    "       batchfs bench [--threads N | --depth D] [--seed S] "
	    "[--samples M] [--direct]\n"
	    "                     --rows SOURCE...\n"
	    "\n"
	    "  --read PATH...   time reading files (a directory: its "
	    "regular files)\n"
	    "                   with BS-byte read()s into one reused "
	    "page-aligned buffer\n"
	    "  --pagecache F... the same after one untimed warm-up read\n"
	    "  --memcpy BYTES   time one single-threaded memcpy of BYTES\n"
	    "  --rows SOURCE... time random preads of every sample's rows "
	    "(each field),\n"
	    "                   in an order shuffled with --seed S (default "
	    "1), from\n"
	    "                   --threads N threads (default 16), --samples M "
	    "at most;\n"
	    "                   --depth D: one thread keeping D reads in "
	    "flight on an\n"
	    "                   io_uring instead (1..4096)\n"
	    "                   --direct: the pages holding each row with "
	    "O_DIRECT\n"
	    "  --bs BYTES       read size (default 1M)\n"
	    "  --repeat N       repetitions, one output line each "
	    "(default 1)\n"
	    "  -h, --help       this help\n"
	    "BYTES accepts K, M, G suffixes (powers of 1024). Output: "
	    "'MODE bytes=.. seconds=.. GB/s=..'\n"
	    "with GB = 10^9 bytes. `make bench` runs the full "
	    "comparison.\n");
}

/* Parse "123", "128K", "1M", "2G" (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -EINVAL;
	switch (*end) {
	case 'K':
	case 'k':
		shift = 10;
		end++;
		break;
	case 'M':
	case 'm':
		shift = 20;
		end++;
		break;
	case 'G':
	case 'g':
		shift = 30;
		end++;
		break;
	default:
		break;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report(const char *mode, uint64_t bytes, double secs, size_t files,
		   uint64_t bs)
{
	printf("%s bytes=%llu seconds=%.6f GB/s=%.3f", mode,
	       (unsigned long long)bytes, secs,
	       secs > 0 ? (double)bytes / secs / 1e9 : 0.0);
	if (files)
		printf(" files=%zu bs=%llu", files, (unsigned long long)bs);
	printf("\n");
	fflush(stdout);
}

static int paths_add(struct paths *p, char *path)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		char **v = realloc(p->v, cap * sizeof(*v));

		if (!v) {
			free(path);
			return -ENOMEM;
		}
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = path;
	return 0;
}

static void paths_free(struct paths *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
}

/* Add 'dir''s regular files (not recursive) in version order. */
static int add_dir(struct paths *p, const char *dir)
{
	struct dirent **ents = NULL;
	int n = scandir(dir, &ents, NULL, versionsort), rc = 0;

	if (n < 0) {
		fprintf(stderr, "batchfs bench: %s: %s\n", dir,
			strerror(errno));
		return -errno;
	}
	for (int i = 0; i < n; i++) {
		char *path = NULL;
		struct stat st;

		if (rc == 0 && ents[i]->d_name[0] != '.' &&
		    asprintf(&path, "%s/%s", dir, ents[i]->d_name) >= 0) {
			if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
				rc = paths_add(p, path);
			else
				free(path);
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

static int collect(struct paths *p, char **args, int n)
{
	struct stat st;

	for (int i = 0; i < n; i++) {
		int rc;

		if (stat(args[i], &st)) {
			fprintf(stderr, "batchfs bench: %s: %s\n", args[i],
				strerror(errno));
			return -ENOENT;
		}
		if (S_ISDIR(st.st_mode))
			rc = add_dir(p, args[i]);
		else
			rc = paths_add(p, strdup(args[i]));
		if (rc)
			return rc;
	}
	return p->n ? 0 : -ENOENT;
}

/* Read every file to its end; *bytes = total. Returns 0 or -errno. */
static int read_all(const struct paths *p, void *buf, uint64_t bs,
		    uint64_t *bytes)
{
	*bytes = 0;
	for (size_t i = 0; i < p->n; i++) {
		int fd = open(p->v[i], O_RDONLY | O_CLOEXEC);
		ssize_t got;

		if (fd < 0) {
			fprintf(stderr, "batchfs bench: %s: %s\n", p->v[i],
				strerror(errno));
			return -errno;
		}
		while ((got = read(fd, buf, bs)) != 0) {
			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0) {
				int err = errno;

				fprintf(stderr, "batchfs bench: read %s: %s\n",
					p->v[i], strerror(err));
				close(fd);
				return -err;
			}
			*bytes += (uint64_t)got;
		}
		close(fd);
	}
	return 0;
}

static int bench_read(const char *mode, char **args, int n, uint64_t bs,
		      int repeat, int warm)
{
	struct paths p = {0};
	void *buf = NULL;
	uint64_t bytes;
	int rc = 1;

	if (collect(&p, args, n))
		goto out;
	if (posix_memalign(&buf, 4096, bs)) {
		fprintf(stderr, "batchfs bench: out of memory (%llu)\n",
			(unsigned long long)bs);
		goto out;
	}
	memset(buf, 0, bs);
	if (warm && read_all(&p, buf, bs, &bytes))
		goto out;
	for (int r = 0; r < repeat; r++) {
		double t0 = now();

		if (read_all(&p, buf, bs, &bytes))
			goto out;
		report(mode, bytes, now() - t0, p.n, bs);
	}
	rc = 0;
out:
	free(buf);
	paths_free(&p);
	return rc;
}

static int bench_memcpy(uint64_t bytes, int repeat)
{
	size_t len = bytes ? (size_t)bytes : 1;
	char *src = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc = 1;

	if (src == MAP_FAILED || dst == MAP_FAILED) {
		fprintf(stderr, "batchfs bench: cannot map 2 x %zu bytes\n",
			len);
		goto out;
	}
	memset(src, 0x5a, len);
	memcpy(dst, src, len); /* fault in dst, warm the TLB */
	for (int r = 0; r < repeat; r++) {
		double t0 = now(), t1;

		memcpy(dst, src, len);
		__asm__ volatile("" : : "r"(dst) : "memory");
		t1 = now();
		report("memcpy", bytes, t1 - t0, 0, 0);
	}
	rc = 0;
out:
	if (src != MAP_FAILED)
		munmap(src, len);
	if (dst != MAP_FAILED)
		munmap(dst, len);
	return rc;
}

/* `batchfs bench`: see the file comment and usage(). Returns 0 after
 * printing one line per repetition, 1 on an I/O or memory failure (the
 * reason printed to stderr), 2 on bad usage. */
int bfs_cmd_bench(int argc, char **argv)
{
	enum {
		OPT_BS = 1,
		OPT_REPEAT,
		OPT_READ,
		OPT_PAGECACHE,
		OPT_MEMCPY,
		OPT_ROWS,
		OPT_THREADS,
		OPT_SEED,
		OPT_SAMPLES,
		OPT_DIRECT,
		OPT_DEPTH
	};
	static const struct option longopts[] = {
	    {"bs", required_argument, NULL, OPT_BS},
	    {"repeat", required_argument, NULL, OPT_REPEAT},
	    {"read", no_argument, NULL, OPT_READ},
	    {"pagecache", no_argument, NULL, OPT_PAGECACHE},
	    {"memcpy", required_argument, NULL, OPT_MEMCPY},
	    {"rows", no_argument, NULL, OPT_ROWS},
	    {"threads", required_argument, NULL, OPT_THREADS},
	    {"seed", required_argument, NULL, OPT_SEED},
	    {"samples", required_argument, NULL, OPT_SAMPLES},
	    {"direct", no_argument, NULL, OPT_DIRECT},
	    {"depth", required_argument, NULL, OPT_DEPTH},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	uint64_t bs = 1u << 20, copy_bytes = 0, repeat = 1;
	uint64_t threads = 16, seed = 1, samples = 0, depth = 0;
	bool direct = false;
	int mode = 0, c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_BS:
			if (parse_size(optarg, &bs) || bs == 0 ||
			    bs > (1ull << 30))
				goto bad_option;
			break;
		case OPT_REPEAT:
			if (parse_size(optarg, &repeat) || repeat == 0 ||
			    repeat > 1000)
				goto bad_option;
			break;
		case OPT_THREADS:
			if (parse_size(optarg, &threads) || threads == 0 ||
			    threads > 1024)
				goto bad_option;
			break;
		case OPT_DEPTH:
			if (parse_size(optarg, &depth) || depth == 0 ||
			    depth > 4096)
				goto bad_option;
			break;
		case OPT_SEED:
			if (parse_size(optarg, &seed))
				goto bad_option;
			break;
		case OPT_SAMPLES:
			if (parse_size(optarg, &samples))
				goto bad_option;
			break;
		case OPT_DIRECT:
			direct = true;
			break;
		case OPT_MEMCPY:
			if (parse_size(optarg, &copy_bytes))
				goto bad_option;
			/* fall through */
		case OPT_ROWS:
		case OPT_READ:
		case OPT_PAGECACHE:
			if (mode && mode != c)
				goto bad_option;
			mode = c;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad_option;
		}
	}
	if (mode == OPT_MEMCPY && optind == argc)
		return bench_memcpy(copy_bytes, (int)repeat);
	if (mode == OPT_ROWS && optind < argc)
		return bfs_bench_rows(argv + optind, argc - optind,
				      (unsigned)threads, (unsigned)depth, seed,
				      samples, direct);
	if ((mode == OPT_READ || mode == OPT_PAGECACHE) && optind < argc)
		return bench_read(mode == OPT_READ ? "read" : "pagecache",
				  argv + optind, argc - optind, bs, (int)repeat,
				  mode == OPT_PAGECACHE);
	return bfs_cli_bad_usage("bench", usage,
				 "expected one of the forms below", NULL);
bad_option:
	return bfs_cli_bad_usage("bench", usage,
				 "unknown option, bad value, or a second mode",
				 argv[optind - 1]);
}
