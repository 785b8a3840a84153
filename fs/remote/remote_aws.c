/* fs/remote/remote_aws: S3 credentials, region and endpoint, found the way the
 * AWS CLI finds them (bfs_remote_aws_load in fs/remote/remote.h), from an
 * environment and a home directory handed in: nothing global is read, so
 * tests give their own.
 *
 * The files are INI as botocore reads them: "[section]" headers, "key =
 * value" lines, '#' and ';' comments; an indented line continues or
 * nests under the key above it (an "s3 =" block of the config file) and
 * is not a key of the profile. Messages name the file and the profile,
 * never a value. */
#include "fs/remote/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAX (1 << 20) /* larger AWS files are refused */

static const char *env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (const char *const *e = envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return (*e)[n + 1] ? *e + n + 1 : NULL;
	return NULL;
}

/* The whole file at 'path' (NUL-terminated, malloc'd) into *out; *out
 * NULL and 0 when it does not exist. */
static int slurp(const char *path, char **out, struct bfs_error *err)
{
	struct stat st;
	char *buf;
	size_t got = 0;
	int fd, rc = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR
			   ? 0
			   : bfs_error_set(err, -errno, path, BFS_NO_OFFSET,
					   "cannot read: %s", strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > FILE_MAX) {
		rc = bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				   "not a regular file of at most 1 MiB");
		goto out_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = 0;
	*out = buf;
out_close:
	close(fd);
	return rc;
}

/* s[0..n) without leading and trailing blanks. */
static void trim(const char **s, size_t *n)
{
	while (*n && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' ||
		      (*s)[*n - 1] == '\r'))
		(*n)--;
}

static bool eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* Whether 'text' has section 'name' ("profile NAME" or "NAME", as the
 * caller spells it); with 'key' non-NULL, its value into out (cap
 * bytes): 1 found, 0 not, -EINVAL too long. */
static int ini_find(const char *text, const char *section, const char *key,
		    char *out, size_t cap)
{
	bool in = false, seen = false;

	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n'), *s = line, *eqs;
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		line = nl ? nl + 1 : NULL;
		if (n && (s[0] == ' ' || s[0] == '\t'))
			continue; /* continued or nested: not a key */
		trim(&s, &n);
		if (!n || s[0] == '#' || s[0] == ';')
			continue;
		if (s[0] == '[') {
			const char *name = s + 1;
			size_t m = n >= 2 && s[n - 1] == ']' ? n - 2 : 0;

			trim(&name, &m);
			in = eq(name, m, section);
			seen |= in;
			continue;
		}
		if (!in || !key || !(eqs = memchr(s, '=', n)))
			continue;
		{
			const char *k = s, *v = eqs + 1;
			size_t kn = (size_t)(eqs - s), vn = n - kn - 1;

			trim(&k, &kn);
			trim(&v, &vn);
			if (!eq(k, kn, key))
				continue;
			if (vn >= cap)
				return -EINVAL;
			memcpy(out, v, vn);
			out[vn] = 0;
			return 1;
		}
	}
	return key ? 0 : seen;
}

/* One of the AWS files, read, and the section name the profile has in it. */
struct aws_file {
	char path[BFS_REMOTE_FIELD_MAX];
	char *text;	   /* NULL: absent */
	char section[300]; /* "NAME" or "profile NAME" */
	bool has_section;
};

static int file_get(const struct aws_file *f, const char *key, char *out,
		    size_t cap, struct bfs_error *err)
{
	int rc = f->text && f->has_section
		     ? ini_find(f->text, f->section, key, out, cap)
		     : 0;

	if (rc < 0)
		return bfs_error_set(err, rc, f->path, BFS_NO_OFFSET,
				     "[%s] %s: value too long", f->section,
				     key);
	return rc;
}

static int file_open(struct aws_file *f, const char *envname, const char *dflt,
		     const char *const *envp, const char *home,
		     struct bfs_error *err)
{
	const char *p = env_get(envp, envname);

	if (p && p[0] == '~' && p[1] == '/' && home)
		snprintf(f->path, sizeof(f->path), "%s%s", home, p + 1);
	else if (p)
		snprintf(f->path, sizeof(f->path), "%s", p);
	else if (home)
		snprintf(f->path, sizeof(f->path), "%s/.aws/%s", home, dflt);
	else
		return 0;
	return slurp(f->path, &f->text, err);
}

/* The key pair (and token) of file 'f''s section: 1 found, 0 none,
 * -EINVAL one of the pair only. */
static int file_keys(struct bfs_remote_aws *a, const struct aws_file *f,
		     const char *profile, struct bfs_error *err)
{
	int ka, ks, rc;

	ka = file_get(f, "aws_access_key_id", a->access_key,
		      sizeof(a->access_key), err);
	ks = file_get(f, "aws_secret_access_key", a->secret_key,
		      sizeof(a->secret_key), err);
	if (ka < 0 || ks < 0)
		return ka < 0 ? ka : ks;
	if (!ka && !ks)
		return 0;
	if (!ka || !ks)
		return bfs_error_set(
		    err, -EINVAL, f->path, BFS_NO_OFFSET,
		    "profile %s has %s but not %s", profile,
		    ka ? "aws_access_key_id" : "aws_secret_access_key",
		    ka ? "aws_secret_access_key" : "aws_access_key_id");
	rc = file_get(f, "aws_session_token", a->session_token,
		      sizeof(a->session_token), err);
	if (rc < 0)
		return rc;
	snprintf(a->source, sizeof(a->source), "profile %.200s (%.800s)",
		 profile, f->path);
	return 1;
}

/* A profile that exists but gets its credentials some other way. */
static int unsupported(const struct aws_file *f, const char *profile,
		       struct bfs_error *err)
{
	static const char *const ways[] = {
	    "role_arn",	     "credential_process",	"sso_session",
	    "sso_start_url", "web_identity_token_file", "credential_source"};
	char v[BFS_REMOTE_FIELD_MAX];

	for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++)
		if (file_get(f, ways[i], v, sizeof(v), NULL) == 1)
			return bfs_error_set(
			    err, -EINVAL, f->path, BFS_NO_OFFSET,
			    "profile %s gets its credentials by %s, which "
			    "batchfs does not do: export them first, e.g. "
			    "eval \"$(aws configure export-credentials "
			    "--profile %s --format env)\"",
			    profile, ways[i], profile);
	return 0;
}

static int from_env(struct bfs_remote_aws *a, const char *const *envp,
		    struct bfs_error *err)
{
	const char *ak = env_get(envp, "AWS_ACCESS_KEY_ID");
	const char *sk = env_get(envp, "AWS_SECRET_ACCESS_KEY");
	const char *tok = env_get(envp, "AWS_SESSION_TOKEN");

	if (!ak && !sk)
		return 0;
	if (!ak || !sk)
		return bfs_error_set(
		    err, -EINVAL, "environment", BFS_NO_OFFSET,
		    "%s is set but %s is not",
		    ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
		    ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	if (!tok)
		tok = env_get(envp, "AWS_SECURITY_TOKEN");
	if (strlen(ak) >= sizeof(a->access_key) ||
	    strlen(sk) >= sizeof(a->secret_key) ||
	    (tok && strlen(tok) >= sizeof(a->session_token)))
		return bfs_error_set(err, -EINVAL, "environment", BFS_NO_OFFSET,
				     "AWS credentials too long");
	strcpy(a->access_key, ak);
	strcpy(a->secret_key, sk);
	strcpy(a->session_token, tok ? tok : "");
	snprintf(a->source, sizeof(a->source),
		 "environment (AWS_ACCESS_KEY_ID)");
	return 1;
}

/* The first of env 'names' (NULL-terminated) set, else 'key' of the
 * config file, else of the credentials file, into out. */
static int setting(char *out, size_t cap, const char *const *envp,
		   const char *const *names, const struct aws_file *cfg,
		   const struct aws_file *cred, const char *key,
		   struct bfs_error *err)
{
	int rc;

	for (; *names; names++) {
		const char *v = env_get(envp, *names);

		if (v) {
			if (strlen(v) >= cap)
				return bfs_error_set(err, -EINVAL, *names,
						     BFS_NO_OFFSET,
						     "value too long");
			strcpy(out, v);
			return 1;
		}
	}
	rc = file_get(cfg, key, out, cap, err);
	return rc ? rc : file_get(cred, key, out, cap, err);
}

static int load(struct bfs_remote_aws *a, const char *const *envp,
		const char *home, struct aws_file *cred, struct aws_file *cfg,
		struct bfs_error *err)
{
	static const char *const region_env[] = {"AWS_REGION",
						 "AWS_DEFAULT_REGION", NULL};
	static const char *const endpoint_env[] = {"AWS_ENDPOINT_URL_S3",
						   "AWS_ENDPOINT_URL", NULL};
	const char *profile = env_get(envp, "AWS_PROFILE");
	bool named;
	int rc;

	if (!profile)
		profile = env_get(envp, "AWS_DEFAULT_PROFILE");
	named = profile != NULL;
	if (!profile)
		profile = "default";
	if (strlen(profile) > 200)
		return bfs_error_set(err, -EINVAL, "AWS_PROFILE", BFS_NO_OFFSET,
				     "profile name too long");
	if (!home)
		home = env_get(envp, "HOME");
	rc = file_open(cred, "AWS_SHARED_CREDENTIALS_FILE", "credentials", envp,
		       home, err);
	if (!rc)
		rc = file_open(cfg, "AWS_CONFIG_FILE", "config", envp, home,
			       err);
	if (rc)
		return rc;
	snprintf(cred->section, sizeof(cred->section), "%s", profile);
	cred->has_section =
	    cred->text && ini_find(cred->text, cred->section, NULL, NULL, 0);
	snprintf(cfg->section, sizeof(cfg->section), "profile %s", profile);
	cfg->has_section =
	    cfg->text && ini_find(cfg->text, cfg->section, NULL, NULL, 0);
	if (!cfg->has_section && strcmp(profile, "default") == 0) {
		snprintf(cfg->section, sizeof(cfg->section), "default");
		cfg->has_section =
		    cfg->text && ini_find(cfg->text, "default", NULL, NULL, 0);
	}

	rc = from_env(a, envp, err);
	if (!rc && named && !cred->has_section && !cfg->has_section)
		return bfs_error_set(
		    err, -EINVAL, "AWS_PROFILE", BFS_NO_OFFSET,
		    "no profile %s in %s or %s", profile,
		    cred->path[0] ? cred->path : "(no credentials file)",
		    cfg->path[0] ? cfg->path : "(no config file)");
	if (!rc)
		rc = file_keys(a, cred, profile, err);
	if (!rc)
		rc = file_keys(a, cfg, profile, err);
	if (!rc)
		rc = unsupported(cfg, profile, err);
	if (!rc)
		rc = unsupported(cred, profile, err);
	if (rc < 0)
		return rc;
	if (!rc)
		snprintf(a->source, sizeof(a->source), "none");

	rc = setting(a->region, sizeof(a->region), envp, region_env, cfg, cred,
		     "region", err);
	if (rc < 0)
		return rc;
	if (!rc)
		snprintf(a->region, sizeof(a->region), "us-east-1");
	rc = setting(a->endpoint, sizeof(a->endpoint), envp, endpoint_env, cfg,
		     cred, "endpoint_url", err);
	return rc < 0 ? rc : 0;
}

int bfs_remote_aws_load(struct bfs_remote_aws *a, const char *const *envp,
			const char *home, struct bfs_error *err)
{
	struct aws_file cred = {.text = NULL}, cfg = {.text = NULL};
	int rc;

	memset(a, 0, sizeof(*a));
	rc = load(a, envp, home, &cred, &cfg, err);
	if (cred.text) {
		explicit_bzero(cred.text, strlen(cred.text));
		free(cred.text);
	}
	if (cfg.text) {
		explicit_bzero(cfg.text, strlen(cfg.text));
		free(cfg.text);
	}
	if (rc)
		bfs_remote_aws_clear(a);
	return rc;
}

void bfs_remote_aws_clear(struct bfs_remote_aws *a)
{
	if (a)
		explicit_bzero(a, sizeof(*a));
}
