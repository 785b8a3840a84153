/* fs/remote: objects on an HTTP(S) server or in an S3-compatible object
 * store, read by range requests (fs/README.md: remote objects).
 *
 * HTTP, TLS and AWS SigV4 signing are libcurl's (its multi interface,
 * connection reuse, CURLOPT_AWS_SIGV4); nothing here writes HTTP or signs
 * by hand.
 *
 *   client   bfs_remote_create: one thread drives a curl multi handle
 *            with up to 'max_in_flight' transfers on the wire, more
 *            requests queued; connections are reused.
 *   object   bfs_remote_open: one GET of bytes 0-0 learns the size, the
 *            ETag and Last-Modified, and pins them: every later range
 *            request is conditional on that version (If-Match, else
 *            If-Unmodified-Since), so bytes of another version are never
 *            delivered (-ESTALE).
 *   request  bfs_remote_submit: bytes [off, off+len) into the caller's
 *            buffer; 'done' is called when it completed or failed. Many
 *            may be in flight; a group waits for several.
 *
 * Each answer is checked before a byte counts: status 206, a
 * Content-Range of exactly the bytes asked for out of the pinned size,
 * the pinned ETag, no Content-Encoding but identity (every request asks
 * for it), exactly len bytes: a body that runs past its Content-Range has
 * the excess cut (a fault only where bytes are missing). A short body, a
 * wrong Content-Range, a 200 to a range request, 5xx, 408, 429 (Retry-After
 * honoured), resets, failed connects and stalls (no byte for 'stall_s')
 * are retried, from the first byte not yet received, with exponential
 * backoff and jitter until the request's deadline ('timeout_s' from its
 * first try). Then the request fails: -ETIMEDOUT when the last try timed
 * out or stalled, else -EIO. Not retried: 404 (-ENOENT), 401/403
 * (-EACCES), 412 or another ETag (-ESTALE, "object replaced"), another
 * Content-Encoding (-EIO, its body not taken).
 *
 * URLs: http://, https:// (a presigned URL is plain HTTPS: its query
 * string is the signature, sent as is, never shown), s3://BUCKET/KEY:
 * path-style ENDPOINT/BUCKET/KEY (the key percent-encoded, '/' kept),
 * signed with credentials found the way AWS tools find them
 * (bfs_remote_aws_load). Paths are sent as written, '.' and '..'
 * segments too (an S3 key may hold them; S3 reads the path as sent).
 *
 * Secrets: no message, log line or counter holds a credential, a
 * signature, a URL's query string or its user:password (objects are
 * named by bfs_remote_url_display). Only debug log lines are written
 * (retries); fs/ prints nothing.
 *
 * Thread-safe: submit, read, stats and open from any thread. Callbacks
 * run on the client's thread: they must not block or call
 * bfs_remote_destroy; they may submit. */
#ifndef BFS_REMOTE_H
#define BFS_REMOTE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

/* ---- URLs (pure functions) ---------------------------------------- */

/* Whether 's' names a remote object: "s3://", "http://" or "https://"
 * (scheme case-insensitive). */
bool bfs_remote_is_url(const char *s);

/* 'url' for messages and files users see, into out (cap bytes, always
 * terminated; cut with "..." when too long): without its query string,
 * its fragment and any user:password@. An http(s) URL refused by
 * bfs_remote_url_check (a password with an unencoded '/', '?' or '#'
 * ends at an '@' after the authority) is shown as its scheme, "***@"
 * and what follows its last '@' to the first '?', '#' or '&'. Returns
 * out. */
const char *bfs_remote_url_display(char *out, size_t cap, const char *url);

/* 0, or -EINVAL with a message naming 'url' masked when it is an http(s)
 * URL whose authority (up to the first '/', '?' or '#') holds a ':' and
 * is followed by an '@': a user:password with an unencoded '/', '?' or
 * '#' (curl would take part of it for the host and port, and show it),
 * or an '@' of the path or query of a URL with a port, which cannot be
 * told apart: both must be percent-encoded. (A user name without a
 * password that holds them is not told from an '@' of a path.) */
int bfs_remote_url_check(const char *url, struct bfs_error *err);

/* The bucket and key of "s3://BUCKET/KEY". Returns 0 or -EINVAL (no
 * bucket, no key, a bucket name S3 does not allow) with a message in err,
 * -ENAMETOOLONG. */
int bfs_remote_s3_split(const char *url, char *bucket, size_t bcap, char *key,
			size_t kcap, struct bfs_error *err);

/* 's' percent-encoded for a URL path as S3 and SigV4 want it: every byte
 * but A-Z a-z 0-9 - . _ ~ and '/' as %XX. Returns 0 or -ENAMETOOLONG. */
int bfs_remote_path_encode(char *out, size_t cap, const char *s);

/* The path-style URL "ENDPOINT/BUCKET/ENCODED-KEY" of "s3://BUCKET/KEY"
 * (endpoint: "http(s)://host[:port][/prefix]", a trailing '/' ignored).
 * Returns 0, -EINVAL (with a message), -ENAMETOOLONG. */
int bfs_remote_s3_http_url(char *out, size_t cap, const char *url,
			   const char *endpoint, struct bfs_error *err);

/* ---- AWS settings ------------------------------------------------- */

#define BFS_REMOTE_KEY_MAX   256
#define BFS_REMOTE_TOKEN_MAX 4096
#define BFS_REMOTE_FIELD_MAX 1024

/* What AWS tools would use. Holds secrets: bfs_remote_aws_clear wipes. */
struct bfs_remote_aws {
	char access_key[BFS_REMOTE_KEY_MAX]; /* "" = anonymous requests */
	char secret_key[BFS_REMOTE_KEY_MAX];
	char session_token[BFS_REMOTE_TOKEN_MAX]; /* "" = none */
	char region[64];
	char endpoint[BFS_REMOTE_FIELD_MAX]; /* "" = AWS's, of 'region' */
	/* Where the credentials came from, for messages (no secret):
	 * "environment (AWS_ACCESS_KEY_ID)", "profile NAME (FILE)", "none". */
	char source[BFS_REMOTE_FIELD_MAX];
};

/* Fill 'a' from an environment and a home directory the way the AWS CLI
 * does (no global state is read: testable):
 *   credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 *                AWS_SESSION_TOKEN), else the profile AWS_PROFILE (else
 *                AWS_DEFAULT_PROFILE, else "default") in the credentials
 *                file (AWS_SHARED_CREDENTIALS_FILE, else
 *                HOME/.aws/credentials; section [NAME]), then in the
 *                config file (AWS_CONFIG_FILE, else HOME/.aws/config;
 *                [profile NAME], or [default]); else none (anonymous);
 *   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
 *                else us-east-1;
 *   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *                endpoint_url, else "".
 * 'envp': "NAME=value" strings, NULL-terminated (NULL: none); 'home':
 * NULL = HOME of envp. Returns 0, or -EINVAL with a message (a profile
 * named but found in neither file, a profile with one key of the pair,
 * a profile that needs what batchfs does not do: role_arn, SSO,
 * credential_process), or -errno of reading a file that exists. */
int bfs_remote_aws_load(struct bfs_remote_aws *a, const char *const *envp,
			const char *home, struct bfs_error *err);

/* Wipe the secrets of 'a' (explicit_bzero). Accepts NULL. */
void bfs_remote_aws_clear(struct bfs_remote_aws *a);

/* ---- the client --------------------------------------------------- */

struct bfs_remote_opts {
	const char *s3_endpoint; /* --s3-endpoint; NULL: AWS settings' */
	const char *const *envp; /* for the AWS settings; NULL: environ */
	const char *home;	 /* NULL: HOME of the environment */
	double timeout_s;	 /* a request's deadline, tries and
				  * waits included; <= 0: 60 */
	double stall_s;		 /* a try that receives no byte for this
				  * long is retried; <= 0: 10, at most
				  * timeout_s */
	unsigned max_in_flight;	 /* transfers on the wire; 0: 64 */
	const char *ca_file;	 /* PEM bundle to trust; NULL: system's */
};

struct bfs_remote;

/* A client (its thread started). The AWS settings are read at the first
 * s3:// open. Returns 0 or -errno (-ENOMEM, -EAGAIN no thread, -EIO
 * libcurl could not start) with a message. */
int bfs_remote_create(struct bfs_remote **out,
		      const struct bfs_remote_opts *opts,
		      struct bfs_error *err);

/* The client's user is going away (the mount's session ended): fail
 * every request not completed yet with -ECANCELED now (their 'done'
 * called on the client's thread), tries on the wire cut, and every later
 * submit at once; nothing is freed (bfs_remote_destroy does that).
 * Thread-safe; returns without waiting. */
void bfs_remote_cancel(struct bfs_remote *r);

/* Fail every request not completed yet with -ECANCELED (their 'done'
 * called), stop the thread, free. Its objects must be closed first, or
 * moved to another client before they are used again
 * (bfs_remote_obj_move). Accepts NULL. */
void bfs_remote_destroy(struct bfs_remote *r);

/* Errors of tries, by kind (the 'errors' counters). */
enum bfs_remote_err_kind {
	BFS_REMOTE_E_CONNECT = 0, /* could not connect or resolve */
	BFS_REMOTE_E_RESET,	  /* connection reset or closed early */
	BFS_REMOTE_E_TIMEOUT,	  /* stalled or out of time */
	BFS_REMOTE_E_THROTTLED,	  /* 429, 503 */
	BFS_REMOTE_E_SERVER,	  /* other 5xx, 408 */
	BFS_REMOTE_E_BAD_REPLY,	  /* short body, wrong Content-Range, 200
				   * to a range request, another
				   * Content-Encoding */
	BFS_REMOTE_E_STALE,	  /* 412, another ETag */
	BFS_REMOTE_E_NOT_FOUND,	  /* 404 */
	BFS_REMOTE_E_DENIED,	  /* 401, 403 */
	BFS_REMOTE_E_OTHER,	  /* TLS, other statuses */
	BFS_REMOTE_E_KINDS
};

/* "connect", "reset", "timeout", "throttled", "server", "bad_reply",
 * "stale", "not_found", "denied", "other". */
const char *bfs_remote_err_kind_name(enum bfs_remote_err_kind k);

struct bfs_remote_stats {
	uint64_t requests;	/* HTTP requests sent (tries, opens included) */
	uint64_t bytes;		/* body bytes received into buffers */
	uint64_t in_flight;	/* transfers on the wire now */
	uint64_t in_flight_max; /* the most on the wire at once */
	uint64_t queued;	/* submitted, waiting for a slot or a retry */
	uint64_t retries;	/* tries that were retried */
	uint64_t done;		/* requests completed */
	uint64_t failed;	/* requests failed */
	uint64_t errors[BFS_REMOTE_E_KINDS]; /* failed tries, by kind */
};

/* The client's counters, now. */
void bfs_remote_stats(struct bfs_remote *r, struct bfs_remote_stats *out);

/* ---- objects ------------------------------------------------------ */

struct bfs_remote_obj;

/* What an object was pinned to at open (strings owned by the object). */
struct bfs_remote_info {
	const char *name; /* bfs_remote_url_display of the URL */
	uint64_t size;
	const char *etag;	   /* as sent, quotes included; "" = none */
	const char *last_modified; /* HTTP date as sent; "" = none */
	const char *auth;	   /* where credentials came from ("" for
				    * http(s): none are sent) */
	/* The URL requests go to, without query, fragment and userinfo
	 * (for s3://, the endpoint's path-style URL): what names the
	 * object apart from another store's (a cache key). */
	const char *where;
	/* Its query string, after the '?' (a fragment may follow; NULL:
	 * none; s3:// never has one: a '?' of a key is encoded in the
	 * path). A secret maybe: never shown nor stored in clear. */
	const char *query;
};

/* Open the object at 'url' (copied): one GET of bytes 0-0 (not HEAD: a
 * presigned GET URL refuses HEAD), retried like any request. Returns 0 or
 *   -ENOENT     no such object (S3: saying whether the bucket or the key
 *               is missing)
 *   -EACCES     credentials refused (saying where they came from)
 *   -EOPNOTSUPP the server ignores Range requests
 *   -EINVAL     a URL batchfs cannot read
 *   -EIO, -ETIMEDOUT as for a request
 * with a message naming the object (err may be NULL). */
int bfs_remote_open(struct bfs_remote *r, const char *url,
		    struct bfs_remote_obj **out, struct bfs_error *err);

/* Free. No request of the object may be in flight. Accepts NULL. */
void bfs_remote_close(struct bfs_remote_obj *o);

void bfs_remote_obj_info(const struct bfs_remote_obj *o,
			 struct bfs_remote_info *out);

/* Make 'o' (pinned, its credentials kept) an object of client 'to': its
 * client is gone (bfs_remote_destroy before a fork, whose child makes a
 * new one: threads do not survive fork) or going. No request of o may
 * be in flight. */
void bfs_remote_obj_move(struct bfs_remote_obj *o, struct bfs_remote *to);

/* ---- requests ----------------------------------------------------- */

struct bfs_remote_req;
struct bfs_remote_group;
typedef void (*bfs_remote_done_fn)(struct bfs_remote_req *req);

/* A range request. The caller owns it and 'buf' until 'done' ran (or
 * the group's wait returned). On failure 'buf' may hold some bytes of
 * the range: they are not data. */
struct bfs_remote_req {
	/* in */
	struct bfs_remote_obj *obj;
	uint64_t off;
	size_t len; /* > 0; off + len <= the object's size */
	void *buf;
	bfs_remote_done_fn done;	/* may be NULL */
	void *arg;			/* for 'done' */
	struct bfs_remote_group *group; /* may be NULL */
	/* out, set before 'done' */
	int result;	      /* 0: buf holds bytes [off, off+len); or -errno */
	unsigned tries;	      /* HTTP requests it took */
	struct bfs_error err; /* "NAME: bytes A-B: reason" on failure */
};

/* Queue 'req'. Returns 0 ('done' will be called once), or without
 * calling 'done': -EINVAL (an empty range, one past the end of the
 * object), -ECANCELED (the client is being destroyed), -ENOMEM. */
int bfs_remote_submit(struct bfs_remote_req *req);

/* Bytes [off, off+len) of 'o' into buf, waiting: 0 or -errno as a
 * request's result, with its message in err (may be NULL). */
int bfs_remote_read(struct bfs_remote_obj *o, void *buf, size_t len,
		    uint64_t off, struct bfs_error *err);

/* Several requests waited for together: set req->group before each
 * submit; bfs_remote_group_wait returns once every one submitted with the
 * group has completed. */
struct bfs_remote_group {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;		     /* lock */
	struct bfs_remote_req *first_failed; /* lock */
};

void bfs_remote_group_init(struct bfs_remote_group *g);
void bfs_remote_group_destroy(struct bfs_remote_group *g);
/* Wait for the group's requests: 0 when all succeeded, else the result
 * of the first that failed (g->first_failed, its message in ->err). */
int bfs_remote_group_wait(struct bfs_remote_group *g);

#endif
