/* fs/remote/remote_try: one HTTP request of a remote object and what its answer
 * means (fs/remote/remote.h has the rules; remote.c drives the requests).
 *
 * A try is a GET of bytes [try_start, end) of the range still missing,
 * conditional on the pinned version. Its answer is checked when its
 * headers are complete, before any body byte is taken: a 206 must carry
 * Content-Range "bytes try_start-B/SIZE" with B inside the range and
 * SIZE the pinned size, and the pinned ETag (or Last-Modified) when it
 * names one; a 200 is taken only for a range that is the whole object.
 * Every try asks for the bytes as they are (Accept-Encoding: identity),
 * and an answer in any other Content-Encoding (gzip) is refused whole:
 * its body is not the object's bytes, and none of it is kept.
 * Body bytes go straight into the caller's buffer at their offset, never
 * past the Content-Range: a body longer than it (no Content-Length, or
 * chunked) has its excess cut and the transfer stopped, and counts as a
 * fault only where bytes of the range are missing; a try that ends early
 * keeps the bytes it got (they are of the pinned version) and the next
 * asks for the rest.
 *
 * Everything here runs on the client's thread; messages are scrubbed of
 * the object's secrets (bfs_remote_scrub) before they are kept. */
#include "fs/remote/remote_impl.h"
#include "fs/log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* SHA-256 of the empty body: S3 wants x-amz-content-sha256, and libcurl
 * before 8.0 neither sends it nor signs a payload hash other than this
 * one for a GET. */
#define EMPTY_SHA256                                                           \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void verdict(struct xfer *x, int rc, bool retry,
		    enum bfs_remote_err_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void verdict(struct xfer *x, int rc, bool retry,
		    enum bfs_remote_err_kind kind, const char *fmt, ...)
{
	va_list ap;

	if (x->verdict)
		return;
	x->verdict = rc;
	x->verdict_retry = retry;
	x->verdict_kind = kind;
	va_start(ap, fmt);
	vsnprintf(x->verdict_msg, sizeof(x->verdict_msg), fmt, ap);
	va_end(ap);
}

static const struct bfs_remote_obj *obj_of(const struct xfer *x)
{
	return x->req->obj;
}

/* One past the last byte the request wants. */
static uint64_t want_end(const struct xfer *x)
{
	return x->kind == XFER_PROBE ? 1 : x->req->off + x->req->len;
}

/* Content-Range "bytes A-B/T", or "bytes *" then "/T" (416); T "*"
 * (unknown) is UINT64_MAX. */
static void parse_content_range(struct xfer *x, const char *v)
{
	unsigned long long a, b;
	char *end;

	if (strncasecmp(v, "bytes", 5))
		return;
	v += 5;
	while (*v == ' ')
		v++;
	if (*v == '*') {
		x->cr_star = true;
		v++;
	} else {
		if (!isdigit((unsigned char)*v))
			return;
		a = strtoull(v, &end, 10);
		if (*end != '-' || !isdigit((unsigned char)end[1]))
			return;
		b = strtoull(end + 1, &end, 10);
		x->cr_a = a;
		x->cr_b = b;
		v = end;
	}
	if (*v++ != '/')
		return;
	if (*v == '*')
		x->cr_total = UINT64_MAX;
	else if (isdigit((unsigned char)*v))
		x->cr_total = strtoull(v, NULL, 10);
	else
		return;
	x->have_cr = true;
}

static void copy_value(char *out, size_t cap, const char *v, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(out, v, n);
	out[n] = 0;
}

/* An answer in a Content-Encoding other than identity: its body is not
 * the object's bytes (a server or proxy that ignored Accept-Encoding:
 * identity). Refused, not retried (such a server answers so again), and
 * said in the log at once, naming the object without its secrets: a
 * read-ahead's failure is otherwise a debug line. */
static bool encoded(struct xfer *x)
{
	char msg[sizeof(x->verdict_msg)];

	if (!x->encoding[0] || !strcasecmp(x->encoding, "identity"))
		return false;
	verdict(x, -EIO, false, BFS_REMOTE_E_BAD_REPLY,
		"answered in Content-Encoding %.40s, not the bytes asked for "
		"(Accept-Encoding: identity); nothing of it kept",
		x->encoding);
	snprintf(msg, sizeof(msg), "%s", x->verdict_msg);
	bfs_remote_scrub(obj_of(x), msg);
	bfs_log(BFS_LOG_ERR, "remote", "%s: bytes %" PRIu64 "-%" PRIu64 ": %s",
		obj_of(x)->name, x->try_start, want_end(x) - 1, msg);
	return true;
}

/* The headers of an answer are complete: may its body be taken? */
static void check_range_answer(struct xfer *x)
{
	const struct bfs_remote_obj *o = obj_of(x);
	uint64_t end = want_end(x);

	if (encoded(x))
		return;
	if (o->etag[0] && x->etag[0] && strcmp(o->etag, x->etag))
		return verdict(x, -ESTALE, false, BFS_REMOTE_E_STALE,
			       "object replaced since it was opened (ETag "
			       "now %.60s, was %.60s)",
			       x->etag, o->etag);
	if (!o->etag[0] && o->last_modified[0] && x->last_modified[0] &&
	    strcmp(o->last_modified, x->last_modified))
		return verdict(x, -ESTALE, false, BFS_REMOTE_E_STALE,
			       "object replaced since it was opened "
			       "(Last-Modified now %s)",
			       x->last_modified);
	if (x->status == 200) {
		if (x->try_start || end != o->size ||
		    (x->have_cl && x->cl != o->size))
			return verdict(x, -EIO, true, BFS_REMOTE_E_BAD_REPLY,
				       "answered 200 (the whole object) to a "
				       "range request");
		x->try_end = end;
		x->accept_body = true;
		return;
	}
	if (x->status != 206 || !x->have_cr || x->cr_star)
		return verdict(x, -EIO, true, BFS_REMOTE_E_BAD_REPLY,
			       "answered %ld without a Content-Range",
			       x->status);
	if (x->cr_total != UINT64_MAX && x->cr_total != o->size)
		return verdict(x, -ESTALE, false, BFS_REMOTE_E_STALE,
			       "object replaced since it was opened (%" PRIu64
			       " bytes now, %" PRIu64 " then)",
			       x->cr_total, o->size);
	if (x->cr_a != x->try_start || x->cr_b < x->cr_a || x->cr_b >= end ||
	    (x->have_cl && x->cl != x->cr_b - x->cr_a + 1))
		return verdict(x, -EIO, true, BFS_REMOTE_E_BAD_REPLY,
			       "wrong Content-Range: bytes %" PRIu64 "-%" PRIu64
			       " for bytes %" PRIu64 "-%" PRIu64,
			       x->cr_a, x->cr_b, x->try_start, end - 1);
	x->try_end = x->cr_b + 1;
	x->accept_body = true;
}

static void check_probe_answer(struct xfer *x)
{
	if (encoded(x))
		return;
	if (x->status == 200) {
		if (x->have_cl && x->cl == 0) {
			x->size = 0; /* an empty object, whole */
			return;
		}
		return verdict(x, -EOPNOTSUPP, false, BFS_REMOTE_E_OTHER,
			       "the server ignores Range requests (it "
			       "answered 200 to bytes=0-0)");
	}
	if (x->status != 206 || !x->have_cr || x->cr_star || x->cr_a ||
	    x->cr_total == UINT64_MAX || !x->cr_total || x->cr_b >= x->cr_total)
		return verdict(x, -EIO, true, BFS_REMOTE_E_BAD_REPLY,
			       "answered %ld to bytes=0-0 without "
			       "Content-Range bytes 0-0/SIZE",
			       x->status);
	x->size = x->cr_total;
	if (x->cr_b) {
		/* more than asked (s3rver 3.7.1 reads "0-0" as "0-"): the
		 * size and version are all open needs; the body is cut */
		x->probe_enough = true;
		return;
	}
	x->try_end = 1;
	x->accept_body = true;
}

static void reset_answer(struct xfer *x)
{
	x->etag[0] = x->last_modified[0] = x->bucket_region[0] = 0;
	x->encoding[0] = 0;
	x->have_cr = x->cr_star = x->have_cl = false;
	x->cr_a = x->cr_b = x->cr_total = x->cl = 0;
	x->body_len = 0;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n, vn;
	const char *colon, *v;

	if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		const char *sp = memchr(line, ' ', len);

		reset_answer(x);
		x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	if (len <= 2 && (line[0] == '\r' || line[0] == '\n')) {
		/* the end of an answer's headers: 1xx and redirects that
		 * curl follows are not the answer */
		if (x->status >= 200 && x->status < 300 && !x->headers_done) {
			x->headers_done = true;
			if (x->kind == XFER_PROBE)
				check_probe_answer(x);
			else
				check_range_answer(x);
		}
		return len;
	}
	colon = memchr(line, ':', len);
	if (!colon)
		return len;
	v = colon + 1;
	vn = len - (size_t)(v - line);
	while (vn && (*v == ' ' || *v == '\t'))
		v++, vn--;
	while (vn &&
	       (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
		vn--;
#define IS(h)                                                                  \
	((size_t)(colon - line) == strlen(h) &&                                \
	 !strncasecmp(line, h, strlen(h)))
	if (IS("etag")) {
		copy_value(x->etag, sizeof(x->etag), v, vn);
	} else if (IS("last-modified")) {
		copy_value(x->last_modified, sizeof(x->last_modified), v, vn);
	} else if (IS("content-encoding")) {
		copy_value(x->encoding, sizeof(x->encoding), v, vn);
	} else if (IS("x-amz-bucket-region")) {
		copy_value(x->bucket_region, sizeof(x->bucket_region), v, vn);
	} else if (IS("content-length")) {
		char tmp[32];

		copy_value(tmp, sizeof(tmp), v, vn);
		x->have_cl = isdigit((unsigned char)tmp[0]);
		x->cl = strtoull(tmp, NULL, 10);
	} else if (IS("content-range")) {
		char tmp[128];

		copy_value(tmp, sizeof(tmp), v, vn);
		parse_content_range(x, tmp);
	}
#undef IS
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n, fit, take;
	char *dst;

	if (x->verdict || x->probe_enough)
		return 0; /* stop: the answer was judged already */
	if (!x->headers_done) {
		/* an error answer's body: keep the start (S3's <Code>) */
		size_t room = sizeof(x->body) - 1 - x->body_len;

		memcpy(x->body + x->body_len, data, len < room ? len : room);
		x->body_len += len < room ? len : room;
		x->body[x->body_len] = 0;
		return len;
	}
	if (!x->accept_body) {
		verdict(x, -EIO, true, BFS_REMOTE_E_BAD_REPLY,
			"a body longer than announced");
		return 0;
	}
	fit = (size_t)(x->try_end - x->try_start - x->try_got);
	take = len < fit ? len : fit;
	if (x->kind == XFER_PROBE)
		dst = &x->probe_byte;
	else
		dst = (char *)x->req->buf + (x->try_start - x->req->off);
	memcpy(dst + x->try_got, data, take);
	x->try_got += take;
	if (take < len) {
		/* more than its Content-Range: every byte it announced is
		 * here; the excess is cut, the transfer stopped */
		x->cut = true;
		return 0;
	}
	return len;
}

/* The try's request headers: the bytes as they are, the condition,
 * S3's. */
static int add_headers(struct xfer *x)
{
	const struct bfs_remote_obj *o = obj_of(x);
	struct curl_slist *h, *t;
	char cond[300];

	if (x->kind == XFER_RANGE && o->etag[0] && o->etag_strong)
		snprintf(cond, sizeof(cond), "If-Match: %s", o->etag);
	else if (x->kind == XFER_RANGE && o->last_modified[0])
		snprintf(cond, sizeof(cond), "If-Unmodified-Since: %s",
			 o->last_modified);
	else
		cond[0] = 0;
	if (!(h = curl_slist_append(NULL, "Accept-Encoding: identity")))
		return -ENOMEM;
	if (cond[0]) {
		t = curl_slist_append(h, cond);
		if (!t)
			goto err_free;
		h = t;
	}
	if (o->sigv4[0]) {
		t = curl_slist_append(h, "x-amz-content-sha256: " EMPTY_SHA256);
		if (!t)
			goto err_free;
		h = t;
		if (o->token_header) {
			t = curl_slist_append(h, o->token_header);
			if (!t)
				goto err_free;
			h = t;
		}
	}
	x->headers = h;
	return 0;
err_free:
	curl_slist_free_all(h);
	return -ENOMEM;
}

int bfs_remote_try_start(struct xfer *x, double now, double stall_s,
			 const char *ca_file)
{
	const struct bfs_remote_obj *o = obj_of(x);
	double left = x->deadline - now;
	long ms = left > 0.001 ? (long)(left * 1000) : 1;
	char range[64];
	CURL *e;

	x->try_start = x->kind == XFER_PROBE ? 0 : x->req->off + x->got;
	x->try_end = x->try_start;
	x->try_got = 0;
	x->status = 0;
	x->headers_done = x->accept_body = x->probe_enough = x->cut = false;
	x->verdict = 0;
	x->verdict_msg[0] = x->curl_err[0] = 0;
	reset_answer(x);
	if (add_headers(x))
		return -ENOMEM;
	e = curl_easy_init();
	if (!e) {
		curl_slist_free_all(x->headers);
		x->headers = NULL;
		return -ENOMEM;
	}
	snprintf(range, sizeof(range), "%" PRIu64 "-%" PRIu64, x->try_start,
		 want_end(x) - 1);
	curl_easy_setopt(e, CURLOPT_URL, o->url);
	/* the path as written, '.' and '..' segments too: an S3 key may
	 * hold them (its path is signed as sent), and so may a presigned
	 * URL's; removed, another object would be read */
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_USERAGENT, "batchfs");
	curl_easy_setopt(e, CURLOPT_RANGE, range);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ms < 10000 ? ms : 10000);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
			 stall_s >= 1 ? (long)(stall_s + 0.5) : 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
	if (ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
	if (o->sigv4[0]) {
		/* redirects are not followed: a signature is for one host */
		curl_easy_setopt(e, CURLOPT_AWS_SIGV4, o->sigv4);
		curl_easy_setopt(e, CURLOPT_USERNAME, o->user);
		curl_easy_setopt(e, CURLOPT_PASSWORD, o->secret);
	} else if (!o->s3) {
		curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
		curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	}
	x->easy = e;
	x->tries++;
	return 0;
}

/* S3's error code from an error body ("<Code>NoSuchKey</Code>"), "" if
 * none; only [A-Za-z0-9.], at most 63 characters. */
static void s3_code(const struct xfer *x, char *out, size_t cap)
{
	const char *p = strstr(x->body, "<Code>");
	size_t n = 0;

	if (p)
		for (p += 6; n + 1 < cap &&
			     (isalnum((unsigned char)p[n]) || p[n] == '.');
		     n++)
			out[n] = p[n];
	out[n] = 0;
}

static void http_status(struct xfer *x)
{
	const struct bfs_remote_obj *o = obj_of(x);
	char code[64], region[192] = "";
	long s = x->status;

	s3_code(x, code, sizeof(code));
	if (o->s3 && x->bucket_region[0])
		snprintf(
		    region, sizeof(region),
		    "; the bucket is in region %.60s: set AWS_REGION=%.60s",
		    x->bucket_region, x->bucket_region);
	x->retry = false;
	x->rc = -EIO;
	x->kind_of_error = BFS_REMOTE_E_OTHER;
	if (s == 404) {
		x->rc = -ENOENT;
		x->kind_of_error = BFS_REMOTE_E_NOT_FOUND;
		if (!o->s3)
			snprintf(x->msg, sizeof(x->msg),
				 "not found (HTTP 404)");
		else if (!strcmp(code, "NoSuchBucket"))
			snprintf(x->msg, sizeof(x->msg), "no such bucket %s",
				 o->bucket);
		else if (!strcmp(code, "NoSuchKey"))
			snprintf(x->msg, sizeof(x->msg),
				 "no such key %.120s in bucket %.100s", o->key,
				 o->bucket);
		else
			snprintf(x->msg, sizeof(x->msg),
				 "no such bucket or key (HTTP 404%s%s)",
				 code[0] ? " " : "", code);
	} else if (s == 401 || s == 403) {
		x->rc = -EACCES;
		x->kind_of_error = BFS_REMOTE_E_DENIED;
		if (o->s3)
			snprintf(x->msg, sizeof(x->msg),
				 "credentials refused (HTTP %ld%s%s); "
				 "credentials from: %.100s%s",
				 s, code[0] ? " " : "", code, o->auth, region);
		else
			snprintf(x->msg, sizeof(x->msg),
				 "access refused (HTTP %ld)%s", s,
				 strchr(o->url, '?')
				     ? "; a presigned URL may have expired"
				     : "");
	} else if (s == 412 || (s == 416 && x->kind == XFER_RANGE)) {
		x->rc = -ESTALE;
		x->kind_of_error = BFS_REMOTE_E_STALE;
		snprintf(x->msg, sizeof(x->msg),
			 "object replaced since it was opened (HTTP %ld)", s);
	} else if (s == 416 && x->have_cr && x->cr_star && !x->cr_total) {
		x->rc = 0; /* an empty object: nothing to range over */
		x->size = 0;
	} else if (s == 429 || s == 503) {
		curl_off_t ra = 0;

		curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &ra);
		x->retry_after = ra > 0 ? (double)ra : 0;
		x->retry = true;
		x->kind_of_error = BFS_REMOTE_E_THROTTLED;
		snprintf(x->msg, sizeof(x->msg), "throttled (HTTP %ld)", s);
	} else if (s == 408 || s >= 500) {
		x->retry = true;
		x->kind_of_error = BFS_REMOTE_E_SERVER;
		snprintf(x->msg, sizeof(x->msg), "server error (HTTP %ld%s%s)",
			 s, code[0] ? " " : "", code);
	} else {
		snprintf(x->msg, sizeof(x->msg), "HTTP %ld%s%s%s", s,
			 code[0] ? " " : "", code, region);
	}
}

static void curl_failed(struct xfer *x, CURLcode cc)
{
	const char *why = x->curl_err[0] ? x->curl_err : curl_easy_strerror(cc);

	x->rc = -EIO;
	x->retry = true;
	x->kind_of_error = BFS_REMOTE_E_RESET;
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
		x->kind_of_error = BFS_REMOTE_E_CONNECT;
		break;
	case CURLE_OPERATION_TIMEDOUT:
		x->kind_of_error = BFS_REMOTE_E_TIMEOUT;
		x->timed_out = true;
		x->rc = -ETIMEDOUT;
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CIPHER:
	case CURLE_TOO_MANY_REDIRECTS:
		x->kind_of_error = BFS_REMOTE_E_OTHER;
		x->retry = false;
		break;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		x->kind_of_error = BFS_REMOTE_E_OTHER;
		x->retry = false;
		x->rc = -EINVAL;
		break;
	case CURLE_OUT_OF_MEMORY:
		x->kind_of_error = BFS_REMOTE_E_OTHER;
		x->retry = false;
		x->rc = -ENOMEM;
		break;
	default:
		break;
	}
	snprintf(x->msg, sizeof(x->msg), "%s", why);
	/* curl's messages end in a newline at times */
	x->msg[strcspn(x->msg, "\r\n")] = 0;
}

void bfs_remote_try_finish(struct xfer *x, CURLcode cc)
{
	long status = 0;

	if (x->accept_body && x->kind == XFER_RANGE)
		x->got += x->try_got;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status)
		x->status = status;
	x->rc = 0;
	x->retry = x->timed_out = false;
	x->retry_after = 0;
	x->msg[0] = 0;
	if (x->verdict) {
		x->rc = x->verdict;
		x->retry = x->verdict_retry;
		x->kind_of_error = x->verdict_kind;
		snprintf(x->msg, sizeof(x->msg), "%s", x->verdict_msg);
	} else if (x->probe_enough) {
		x->rc = 0; /* open learnt what it needs */
	} else if (cc != CURLE_OK && !x->cut) {
		curl_failed(x, cc);
	} else if (x->status >= 200 && x->status < 300) {
		if (x->kind == XFER_RANGE && x->got < x->req->len) {
			x->rc = -EIO;
			x->retry = true;
			x->kind_of_error = BFS_REMOTE_E_BAD_REPLY;
			snprintf(x->msg, sizeof(x->msg),
				 "short answer: %" PRIu64 " of %zu bytes",
				 x->got, x->req->len);
		}
	} else {
		http_status(x);
	}
	bfs_remote_scrub(obj_of(x), x->msg);
	curl_slist_free_all(x->headers);
	x->headers = NULL;
}

/* Replace every occurrence of needle[0..n) in msg by "***". */
static void scrub_one(char *msg, const char *needle, size_t n)
{
	char *p;

	if (n < 3) /* too short to be a secret, too common to cut */
		return;
	while ((p = memmem(msg, strlen(msg), needle, n))) {
		memmove(p + 3, p + n, strlen(p + n) + 1);
		memcpy(p, "***", 3);
	}
}

void bfs_remote_scrub(const struct bfs_remote_obj *o, char *msg)
{
	const char *q, *auth, *at;

	if (!o || !msg)
		return;
	if (o->secret)
		scrub_one(msg, o->secret, strlen(o->secret));
	if (o->token_header) {
		const char *t = strchr(o->token_header, ':');

		if (t)
			scrub_one(msg, t + 2, strlen(t + 2));
	}
	if (o->user)
		scrub_one(msg, o->user, strlen(o->user));
	q = strpbrk(o->url, "?#");
	if (q) {
		scrub_one(msg, q + 1, strlen(q + 1));
		/* and each parameter, and its value, on its own */
		for (const char *p = q + 1; *p;) {
			size_t n = strcspn(p, "&#");
			const char *eq = memchr(p, '=', n);

			scrub_one(msg, p, n);
			if (eq)
				scrub_one(msg, eq + 1,
					  n - (size_t)(eq + 1 - p));
			p += n + (p[n] ? 1 : 0);
		}
	}
	auth = strstr(o->url, "://");
	if (auth) {
		auth += 3;
		at = memchr(auth, '@', strcspn(auth, "/?#"));
		if (at) {
			const char *colon =
			    memchr(auth, ':', (size_t)(at - auth));

			scrub_one(msg, auth, (size_t)(at - auth));
			if (colon)
				scrub_one(msg, colon + 1,
					  (size_t)(at - colon - 1));
		}
	}
}
