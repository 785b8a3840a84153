/* fs/remote: private to the room (remote.c: the client and its thread;
 * remote_try.c: one HTTP request and what its answer means). */
#ifndef BFS_REMOTE_IMPL_H
#define BFS_REMOTE_IMPL_H

#include <curl/curl.h>

#include "fs/remote/remote.h"

struct bfs_remote_obj {
	struct bfs_remote *r;
	char *url;	  /* what curl is given: may hold a secret query */
	char name[1024];  /* bfs_remote_url_display(url as the user wrote) */
	char where[4096]; /* bfs_remote_url_display(url): no secret */
	bool s3;	  /* signed, S3 error bodies */
	char bucket[256]; /* s3 */
	char *key;	  /* s3: as the user wrote it */
	/* Pinned at open; immutable afterwards. */
	uint64_t size;
	char etag[256]; /* as sent; "" none */
	bool etag_strong;
	char last_modified[64];
	char auth[BFS_REMOTE_FIELD_MAX];
	/* Signing (s3 with credentials): secrets, wiped at close. */
	char sigv4[96]; /* "aws:amz:REGION:s3"; "" = unsigned */
	char *user, *secret, *token_header;
};

enum xfer_kind {
	XFER_RANGE = 0,
	XFER_PROBE, /* open: bytes 0-0 learn size and version */
};

/* One request, across its tries (owned by the client's thread once
 * submitted; on the 'ready' or 'later' list under the lock, or on the
 * wire). */
struct xfer {
	struct xfer *next;
	struct bfs_remote *r;
	struct bfs_remote_req *req;
	enum xfer_kind kind;
	uint64_t got;	 /* bytes of the range received and checked */
	double started;	 /* first try began (monotonic s); 0: not yet */
	double deadline; /* started + timeout */
	double due;	 /* a retry: not before */
	unsigned tries;
	char probe_byte; /* XFER_PROBE: where byte 0 goes */
	/* The try on the wire. */
	CURL *easy;
	struct curl_slist *headers;
	long status;
	bool headers_done;  /* the final answer's headers were checked */
	bool accept_body;   /* they were, and the body is the range's */
	bool probe_enough;  /* XFER_PROBE: size and version known; the
			     * rest of the body is not wanted */
	bool cut;	    /* the body ran past its Content-Range: the
			     * excess was cut, the transfer stopped */
	uint64_t try_start; /* first byte this try asked for */
	uint64_t try_end;   /* one past the last byte the answer holds */
	uint64_t try_got;
	int verdict; /* set by the callbacks: 0, or -errno that ends it */
	bool verdict_retry;
	enum bfs_remote_err_kind verdict_kind;
	char verdict_msg[200];
	/* Headers of the current answer. */
	char etag[256], last_modified[64], bucket_region[64];
	char encoding[64]; /* Content-Encoding, "" when none */
	bool have_cr, cr_star, have_cl;
	uint64_t cr_a, cr_b, cr_total, cl;
	char body[1024]; /* an error answer's body (S3's <Code>) */
	size_t body_len;
	char curl_err[CURL_ERROR_SIZE];
	/* Probe results. */
	uint64_t size;
	/* The outcome of the last try (retried or final). */
	int rc;
	bool retry, timed_out;
	bool refused_only; /* XFER_PROBE: every try so far was refused (no
			    * server listened at the address) */
	bool said;	   /* XFER_PROBE: the waiting line was logged */
	enum bfs_remote_err_kind kind_of_error;
	double retry_after;
	char msg[400];
};

/* Set up x's next try on a fresh easy handle (x->easy): 0 or -ENOMEM. */
int bfs_remote_try_start(struct xfer *x, double now, double stall_s,
			 const char *ca_file);

/* What the finished try of x means (curl's result 'cc'): fills x->rc
 * (0 done, else -errno), x->retry, x->kind_of_error, x->msg,
 * x->retry_after, x->timed_out; adds what was received to x->got. Frees
 * the try's headers (the caller removes and frees the easy handle). */
void bfs_remote_try_finish(struct xfer *x, CURLcode cc);

/* 'msg' with every occurrence of the object's secrets (and of its URL's
 * query string and user:password) replaced by "***". */
void bfs_remote_scrub(const struct bfs_remote_obj *o, char *msg);

#endif
