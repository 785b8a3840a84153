/* fs/remote/remote_url: the URLs of remote objects (fs/remote/remote.h), pure
 * string work: which strings are remote, s3:// to path-style HTTP, the
 * percent-encoding of keys, and a URL made fit for messages (no query
 * string, no user:password: they may be secrets). */
#include "fs/remote/remote.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool has_prefix_ci(const char *s, const char *p)
{
	return strncasecmp(s, p, strlen(p)) == 0;
}

bool bfs_remote_is_url(const char *s)
{
	return s && (has_prefix_ci(s, "s3://") || has_prefix_ci(s, "http://") ||
		     has_prefix_ci(s, "https://"));
}

/* Append s[0..n) to out at *pos (cap bytes): 0, or -1 once it did not
 * fit (then out ends in "..."). */
static int put(char *out, size_t cap, size_t *pos, const char *s, size_t n)
{
	size_t room = cap >= 4 ? cap - 4 : 0; /* what fits before "..." */

	if (*pos + n < cap) {
		memcpy(out + *pos, s, n);
		*pos += n;
		out[*pos] = 0;
		return 0;
	}
	if (*pos < room)
		memcpy(out + *pos, s, room - *pos);
	if (cap >= 4)
		memcpy(out + room, "...", 4);
	else
		out[0] = 0;
	*pos = cap - 1;
	return -1;
}

/* The last '@' of an http(s) URL after its authority (which ends at the
 * first '/', '?' or '#') when that authority holds a ':', or NULL: the
 * end of a userinfo whose password holds an unencoded '/', '?' or '#'
 * ("user:pa" is no host:port, "user:12" the host "user"), or an '@' of
 * the path or query of a URL with a port, which cannot be told apart.
 * Without a ':' an '@' after the authority is the path's or query's. */
static const char *stray_at(const char *url)
{
	const char *auth, *end;

	if (!url ||
	    !(has_prefix_ci(url, "http://") || has_prefix_ci(url, "https://")))
		return NULL;
	auth = strstr(url, "://") + 3;
	end = auth + strcspn(auth, "/?#");
	if (!*end || !memchr(auth, ':', (size_t)(end - auth)))
		return NULL;
	return strrchr(end, '@');
}

const char *bfs_remote_url_display(char *out, size_t cap, const char *url)
{
	const char *p = url, *auth, *end, *at;
	size_t pos = 0, n;

	if (!cap)
		return out;
	out[0] = 0;
	if (!url)
		return out;
	at = stray_at(url);
	if (at) {
		/* all before it masked; what follows, to the first '?', '#'
		 * or '&' (it may be the rest of a query) */
		auth = strstr(url, "://");
		if (put(out, cap, &pos, url, (size_t)(auth - url) + 3) ||
		    put(out, cap, &pos, "***@", 4))
			return out;
		put(out, cap, &pos, at + 1, strcspn(at + 1, "?#&"));
		return out;
	}
	/* scheme:// */
	auth = strstr(url, "://");
	if (auth && (size_t)(auth - url) < 16 &&
	    strcspn(url, "/?#") == (size_t)(auth - url) + 1) {
		if (put(out, cap, &pos, url, (size_t)(auth - url) + 3))
			return out;
		p = auth + 3;
		/* authority: up to '/', '?' or '#'; drop "user:pass@" */
		n = strcspn(p, "/?#");
		end = p + n;
		at = NULL;
		for (const char *q = p; q < end; q++)
			if (*q == '@')
				at = q;
		if (at)
			p = at + 1;
		if (put(out, cap, &pos, p, (size_t)(end - p)))
			return out;
		p = end;
	}
	/* the path, without query or fragment */
	n = strcspn(p, "?#");
	put(out, cap, &pos, p, n);
	return out;
}

int bfs_remote_url_check(const char *url, struct bfs_error *err)
{
	char shown[256];

	if (!stray_at(url))
		return 0;
	return bfs_error_set(
	    err, -EINVAL, bfs_remote_url_display(shown, sizeof(shown), url),
	    BFS_NO_OFFSET,
	    "an '@' after the host: percent-encode the user:password's '/', "
	    "'?', '#' and '@' (%%2F, %%3F, %%23, %%40), and an '@' of the "
	    "path or query of a URL with a port (%%40)");
}

/* Bucket names S3 allows, and the legacy ones (capitals, '_'); nothing
 * that would change the URL's shape. */
static bool bucket_ok(const char *b, size_t n)
{
	if (n < 1 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = b[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '-' ||
		      c == '_'))
			return false;
	}
	return true;
}

int bfs_remote_s3_split(const char *url, char *bucket, size_t bcap, char *key,
			size_t kcap, struct bfs_error *err)
{
	char shown[256];
	const char *b, *slash;
	size_t bn;

	if (!url || !has_prefix_ci(url, "s3://"))
		return bfs_error_set(err, -EINVAL, "(url)", BFS_NO_OFFSET,
				     "not an s3:// URL");
	bfs_remote_url_display(shown, sizeof(shown), url);
	b = url + 5;
	slash = strchr(b, '/');
	if (!slash || !slash[1])
		return bfs_error_set(err, -EINVAL, shown, BFS_NO_OFFSET,
				     "an s3:// URL names a bucket and a key: "
				     "s3://BUCKET/KEY");
	bn = (size_t)(slash - b);
	if (!bucket_ok(b, bn))
		return bfs_error_set(err, -EINVAL, shown, BFS_NO_OFFSET,
				     "not a bucket name S3 allows (letters, "
				     "digits, '.', '-', '_')");
	if (bn >= bcap || strlen(slash + 1) >= kcap)
		return bfs_error_set(err, -ENAMETOOLONG, shown, BFS_NO_OFFSET,
				     "URL too long");
	memcpy(bucket, b, bn);
	bucket[bn] = 0;
	strcpy(key, slash + 1);
	return 0;
}

int bfs_remote_path_encode(char *out, size_t cap, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t pos = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned char c = *p;
		bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			     (c >= '0' && c <= '9') || c == '-' || c == '.' ||
			     c == '_' || c == '~' || c == '/';

		if (pos + (plain ? 1 : 3) >= cap)
			return -ENAMETOOLONG;
		if (plain) {
			out[pos++] = (char)c;
		} else {
			out[pos++] = '%';
			out[pos++] = hex[c >> 4];
			out[pos++] = hex[c & 15];
		}
	}
	if (pos >= cap)
		return -ENAMETOOLONG;
	out[pos] = 0;
	return 0;
}

int bfs_remote_s3_http_url(char *out, size_t cap, const char *url,
			   const char *endpoint, struct bfs_error *err)
{
	char bucket[256], key[BFS_REMOTE_FIELD_MAX * 2], shown[256];
	size_t en, pos;
	int rc;

	rc = bfs_remote_s3_split(url, bucket, sizeof(bucket), key, sizeof(key),
				 err);
	if (rc)
		return rc;
	if (!endpoint || !(has_prefix_ci(endpoint, "http://") ||
			   has_prefix_ci(endpoint, "https://")))
		return bfs_error_set(
		    err, -EINVAL,
		    bfs_remote_url_display(shown, sizeof(shown), endpoint),
		    BFS_NO_OFFSET,
		    "an S3 endpoint is an http:// or https:// URL");
	rc = bfs_remote_url_check(endpoint, err);
	if (rc)
		return rc;
	if (strpbrk(endpoint, "?#"))
		return bfs_error_set(
		    err, -EINVAL,
		    bfs_remote_url_display(shown, sizeof(shown), endpoint),
		    BFS_NO_OFFSET,
		    "an S3 endpoint has no query string or fragment");
	en = strlen(endpoint);
	while (en && endpoint[en - 1] == '/')
		en--;
	pos = (size_t)snprintf(out, cap, "%.*s/%s/", (int)en, endpoint, bucket);
	if (pos >= cap || bfs_remote_path_encode(out + pos, cap - pos, key))
		return bfs_error_set(
		    err, -ENAMETOOLONG,
		    bfs_remote_url_display(shown, sizeof(shown), url),
		    BFS_NO_OFFSET, "URL too long");
	return 0;
}
