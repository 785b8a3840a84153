/* fs/remote without a server: URLs (which strings are remote, s3:// to
 * path-style, percent-encoded keys, URLs shown without query string or
 * user:password), the AWS settings found as the AWS CLI finds them (from
 * an environment and a home directory of the test's own), messages
 * scrubbed of an object's secrets, and the client's answers that need no
 * server: a URL it cannot read, a port nobody listens on (retried, then
 * EIO within the timeout), a client destroyed while an open waits
 * (ECANCELED). The servers' tests are in tests/remote/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/remote/remote.h"
#include "fs/remote/remote_impl.h"

static char home[512];

static void write_file(const char *rel, const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", home, rel);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int setup(void **state)
{
	const char *t = getenv("BFS_TEST_TMP");
	char aws[600];

	snprintf(home, sizeof(home), "%s/test_remote.%d", t ? t : "/tmp",
		 (int)getpid());
	snprintf(aws, sizeof(aws), "%s/.aws", home);
	return mkdir(home, 0700) || mkdir(aws, 0700);
}

static int teardown(void **state)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_is_url(void **state)
{
	assert_true(bfs_remote_is_url("s3://b/k"));
	assert_true(bfs_remote_is_url("HTTPS://host/x"));
	assert_true(bfs_remote_is_url("http://host/x"));
	assert_false(bfs_remote_is_url("/data/x.pt"));
	assert_false(bfs_remote_is_url("s3:/b/k"));
	assert_false(bfs_remote_is_url("ftp://host/x"));
	assert_false(bfs_remote_is_url(NULL));
}

static void test_url_display_drops_query_and_userinfo(void **state)
{
	char out[128];

	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out),
				   "https://h.example/p/a.pt?X-Amz-Signature="
				   "abc&X-Amz-Credential=AKID"),
	    "https://h.example/p/a.pt");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out),
				   "http://user:pw@h:8080/a#frag"),
	    "http://h:8080/a");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out), "http://u:p@h?q=secret"),
	    "http://h");
	/* an '@' in the path is not userinfo */
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out), "http://h/a@b/c?x"),
	    "http://h/a@b/c");
	/* a password with an unencoded '/', '?' or '#': all before the
	 * last '@' masked, and the rest of a query */
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out),
				   "https://user:pa/ss?w#rd@h:81/x.pt?sig=S"),
	    "https://***@h:81/x.pt");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out), "http://bob:12/34@h/x"),
	    "http://***@h/x");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out),
				   "http://h:80/x?cred=a@b.example/d&sig=S"),
	    "http://***@b.example/d");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out), "s3://bucket/k ey?x"),
	    "s3://bucket/k ey");
	assert_string_equal(
	    bfs_remote_url_display(out, sizeof(out), "s3://b:x/u:p/w@k"),
	    "s3://b:x/u:p/w@k");
	assert_string_equal(
	    bfs_remote_url_display(out, 12, "https://host/long/path?sig"),
	    "https://...");
	assert_string_equal(bfs_remote_url_display(out, 4, "http://h/"), "...");
}

static void test_s3_split_and_encode(void **state)
{
	struct bfs_error err = {{0}};
	char b[64], k[256], url[512];

	assert_int_equal(bfs_remote_s3_split("s3://my-bucket/dir/a b.pt", b,
					     sizeof(b), k, sizeof(k), &err),
			 0);
	assert_string_equal(b, "my-bucket");
	assert_string_equal(k, "dir/a b.pt");
	assert_int_equal(bfs_remote_s3_split("s3://bucket", b, sizeof(b), k,
					     sizeof(k), &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "s3://BUCKET/KEY"));
	memset(&err, 0, sizeof(err));
	assert_int_equal(bfs_remote_s3_split("s3://bu?cket/k", b, sizeof(b), k,
					     sizeof(k), &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "bucket name"));

	assert_int_equal(bfs_remote_path_encode(url, sizeof(url),
						"dir/my key+%\xc3\xa9~._-"),
			 0);
	assert_string_equal(url, "dir/my%20key%2B%25%C3%A9~._-");
	assert_int_equal(bfs_remote_path_encode(url, 5, "abcde"),
			 -ENAMETOOLONG);

	assert_int_equal(bfs_remote_s3_http_url(url, sizeof(url),
						"s3://b/x y/z?.pt",
						"http://127.0.0.1:9000/", &err),
			 0);
	assert_string_equal(url, "http://127.0.0.1:9000/b/x%20y/z%3F.pt");
	assert_int_equal(bfs_remote_s3_http_url(url, sizeof(url), "s3://b/k",
						"https://gw.example/s3", &err),
			 0);
	assert_string_equal(url, "https://gw.example/s3/b/k");
	memset(&err, 0, sizeof(err));
	assert_int_equal(bfs_remote_s3_http_url(url, sizeof(url), "s3://b/k",
						"ftp://host", &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "http:// or https://"));
}

/* bfs_remote_aws_load over 'env' (NULL-terminated) with the test's home. */
static int load(struct bfs_remote_aws *a, struct bfs_error *err,
		const char **env)
{
	memset(err, 0, sizeof(*err));
	return bfs_remote_aws_load(a, env, home, err);
}

static void test_aws_environment(void **state)
{
	struct bfs_remote_aws a;
	struct bfs_error err;
	const char *env[] = {"AWS_ACCESS_KEY_ID=AKID",
			     "AWS_SECRET_ACCESS_KEY=sekrit",
			     "AWS_SESSION_TOKEN=tok",
			     "AWS_REGION=eu-west-3",
			     "AWS_ENDPOINT_URL=http://e1",
			     "AWS_ENDPOINT_URL_S3=http://e2",
			     NULL};
	const char *half[] = {"AWS_ACCESS_KEY_ID=AKIDHALF", NULL};

	assert_int_equal(load(&a, &err, env), 0);
	assert_string_equal(a.access_key, "AKID");
	assert_string_equal(a.secret_key, "sekrit");
	assert_string_equal(a.session_token, "tok");
	assert_string_equal(a.region, "eu-west-3");
	assert_string_equal(a.endpoint, "http://e2");
	assert_string_equal(a.source, "environment (AWS_ACCESS_KEY_ID)");
	bfs_remote_aws_clear(&a);
	assert_string_equal(a.secret_key, "");

	assert_int_equal(load(&a, &err, half), -EINVAL);
	assert_non_null(strstr(err.msg, "AWS_SECRET_ACCESS_KEY is not"));
	assert_null(strstr(err.msg, "AKIDHALF"));
}

static void test_aws_nothing_is_anonymous(void **state)
{
	struct bfs_remote_aws a;
	struct bfs_error err = {{0}};
	const char *env[] = {NULL};

	/* no HOME at all, no variables */
	assert_int_equal(bfs_remote_aws_load(&a, env, NULL, &err), 0);
	assert_string_equal(a.access_key, "");
	assert_string_equal(a.source, "none");
	assert_string_equal(a.region, "us-east-1");
	assert_string_equal(a.endpoint, "");
}

static void test_aws_profiles(void **state)
{
	struct bfs_remote_aws a;
	struct bfs_error err;
	const char *dflt[] = {NULL};
	const char *team[] = {"AWS_PROFILE=team", NULL};
	const char *team_region[] = {"AWS_PROFILE=team",
				     "AWS_DEFAULT_REGION=ap-south-1", NULL};
	const char *cfgonly[] = {"AWS_PROFILE=cfgonly", NULL};
	const char *nosuch[] = {"AWS_PROFILE=nosuch", NULL};
	char want[1024];

	write_file(".aws/credentials",
		   "# comment\n[default]\naws_access_key_id = DKEY\n"
		   "aws_secret_access_key = dsecret\n\n"
		   "[team]\n  aws_access_key_id=ignored-indented\n"
		   "aws_access_key_id=TKEY\r\n"
		   "aws_secret_access_key = tsecret \n"
		   "aws_session_token = ttoken\n");
	write_file(".aws/config",
		   "[default]\nregion = us-west-2\n"
		   "[profile team]\n; comment\nregion = eu-central-1\n"
		   "s3 =\n  endpoint_url = http://nested-not-top\n"
		   "endpoint_url = http://top\n"
		   "[profile cfgonly]\naws_access_key_id = CKEY\n"
		   "aws_secret_access_key = csecret\n");

	assert_int_equal(load(&a, &err, dflt), 0);
	assert_string_equal(a.access_key, "DKEY");
	assert_string_equal(a.region, "us-west-2");
	snprintf(want, sizeof(want), "profile default (%s/.aws/credentials)",
		 home);
	assert_string_equal(a.source, want);

	assert_int_equal(load(&a, &err, team), 0);
	assert_string_equal(a.access_key, "TKEY");
	assert_string_equal(a.secret_key, "tsecret");
	assert_string_equal(a.session_token, "ttoken");
	assert_string_equal(a.region, "eu-central-1");
	assert_string_equal(a.endpoint, "http://top");

	assert_int_equal(load(&a, &err, team_region), 0);
	assert_string_equal(a.region, "ap-south-1");

	assert_int_equal(load(&a, &err, cfgonly), 0);
	assert_string_equal(a.access_key, "CKEY");
	snprintf(want, sizeof(want), "profile cfgonly (%s/.aws/config)", home);
	assert_string_equal(a.source, want);

	assert_int_equal(load(&a, &err, nosuch), -EINVAL);
	assert_non_null(strstr(err.msg, "no profile nosuch"));
	bfs_remote_aws_clear(&a);
}

static void test_aws_refusals_name_no_secret(void **state)
{
	struct bfs_remote_aws a;
	struct bfs_error err;
	char cred[600], cfg[600];
	const char *half[] = {"AWS_PROFILE=half", NULL};
	const char *role[] = {"AWS_PROFILE=role", NULL};
	const char *files[] = {"AWS_SHARED_CREDENTIALS_FILE=~/elsewhere/c",
			       NULL, NULL};

	write_file(".aws/credentials",
		   "[half]\naws_secret_access_key = HALFSECRET\n");
	write_file(".aws/config",
		   "[profile role]\nrole_arn = arn:aws:iam::1:role/r\n"
		   "source_profile = default\n");
	assert_int_equal(load(&a, &err, half), -EINVAL);
	assert_non_null(strstr(err.msg, "profile half has "
					"aws_secret_access_key but not "
					"aws_access_key_id"));
	assert_null(strstr(err.msg, "HALFSECRET"));
	assert_int_equal(load(&a, &err, role), -EINVAL);
	assert_non_null(strstr(err.msg, "role_arn"));
	assert_non_null(strstr(err.msg, "export-credentials"));

	/* AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE, "~/" expanded */
	snprintf(cred, sizeof(cred), "%s/elsewhere", home);
	assert_int_equal(mkdir(cred, 0700), 0);
	write_file("elsewhere/c", "[default]\naws_access_key_id = EKEY\n"
				  "aws_secret_access_key = esecret\n");
	write_file("elsewhere/cfg", "[default]\nregion = sa-east-1\n");
	snprintf(cfg, sizeof(cfg), "AWS_CONFIG_FILE=%s/elsewhere/cfg", home);
	files[1] = cfg;
	assert_int_equal(load(&a, &err, files), 0);
	assert_string_equal(a.access_key, "EKEY");
	assert_string_equal(a.region, "sa-east-1");
	bfs_remote_aws_clear(&a);
}

static void test_scrub_removes_secrets(void **state)
{
	struct bfs_remote_obj o = {0};
	char url[] = "https://user:pa55word@h/p?X-Amz-Signature=abcdef"
		     "&X-Amz-Credential=CREDVALUE";
	char user[] = "AKIDSCRUB", secret[] = "s3cr3t/key",
	     tok[] = "x-amz-security-token: T0KEN";
	char msg[256];

	o.url = url;
	o.user = user;
	o.secret = secret;
	o.token_header = tok;
	snprintf(msg, sizeof(msg),
		 "AKIDSCRUB s3cr3t/key T0KEN pa55word "
		 "X-Amz-Signature=abcdef CREDVALUE and the rest");
	bfs_remote_scrub(&o, msg);
	assert_null(strstr(msg, "AKIDSCRUB"));
	assert_null(strstr(msg, "s3cr3t"));
	assert_null(strstr(msg, "T0KEN"));
	assert_null(strstr(msg, "pa55word"));
	assert_null(strstr(msg, "abcdef"));
	assert_null(strstr(msg, "CREDVALUE"));
	assert_non_null(strstr(msg, "and the rest"));
}

static struct bfs_remote *client(double timeout)
{
	struct bfs_remote_opts opts = {.timeout_s = timeout, .stall_s = 1};
	struct bfs_error err = {{0}};
	struct bfs_remote *r;

	assert_int_equal(bfs_remote_create(&r, &opts, &err), 0);
	return r;
}

/* A port on 127.0.0.1 that listens and never answers (or, with
 * 'close_it', that nobody listens on any more). */
static int silent_port(int *fd, bool close_it)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);

	*fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(*fd >= 0);
	assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(*fd, 16), 0);
	assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
	if (close_it)
		close(*fd);
	return ntohs(a.sin_port);
}

static void test_client_refusals(void **state)
{
	static const char *const pieces[] = {"USR", "PW1", "PW2", "PW3", "PW4"};
	struct bfs_remote *r = client(1.0);
	struct bfs_remote_obj *o = (void *)1;
	struct bfs_remote_stats st;
	struct bfs_error err = {{0}};
	char url[128];
	int fd, port = silent_port(&fd, true);

	assert_int_equal(bfs_remote_open(r, "/local/file", &o, &err), -EINVAL);
	assert_null(o);
	memset(&err, 0, sizeof(err));
	assert_int_equal(bfs_remote_open(r, "s3://onlybucket", &o, &err),
			 -EINVAL);
	/* a password with an unencoded '/', '?', '#': refused, masked */
	memset(&err, 0, sizeof(err));
	assert_int_equal(
	    bfs_remote_open(r, "http://USR:PW1/PW2?PW3#PW4@h/x", &o, &err),
	    -EINVAL);
	assert_null(o);
	assert_non_null(strstr(err.msg, "http://***@h/x: "));
	assert_non_null(strstr(err.msg, "percent-encode"));
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
		assert_null(strstr(err.msg, pieces[i]));
	assert_int_equal(bfs_remote_url_check("http://h/a@b/c", NULL), 0);
	assert_int_equal(bfs_remote_url_check("s3://b/u:p/w@k", NULL), 0);
	assert_int_equal(bfs_remote_url_check("http://u:p%2Fw@h:1/x", NULL), 0);
	assert_int_equal(bfs_remote_url_check("http://h:1/a@b", NULL), -EINVAL);
	memset(&err, 0, sizeof(err));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x?sig=SECRETSIG", port);
	assert_int_equal(bfs_remote_open(r, url, &o, &err), -EIO);
	/* nothing listens: refused on every try (remote.c: REFUSED_GIVEUP_S) */
	assert_non_null(strstr(err.msg, "connection refused on each of"));
	assert_null(strstr(err.msg, "SECRETSIG"));
	bfs_remote_stats(r, &st);
	assert_true(st.retries >= 1);
	assert_true(st.errors[BFS_REMOTE_E_CONNECT] >= 2);
	assert_int_equal(st.failed, 1);
	assert_int_equal(st.in_flight + st.queued, 0);
	bfs_remote_destroy(r);
}

struct opener {
	struct bfs_remote *r;
	const char *url;
	int rc;
};

static void *open_thread(void *arg)
{
	struct opener *op = arg;
	struct bfs_remote_obj *o;

	op->rc = bfs_remote_open(op->r, op->url, &o, NULL);
	return NULL;
}

static void test_destroy_cancels_what_waits(void **state)
{
	struct opener op = {.r = client(30.0)};
	char url[128];
	pthread_t t;
	int fd, port = silent_port(&fd, false);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x", port);
	op.url = url;
	assert_int_equal(pthread_create(&t, NULL, open_thread, &op), 0);
	usleep(200 * 1000); /* the open is on the wire (or queued) */
	bfs_remote_destroy(op.r);
	pthread_join(t, NULL);
	assert_int_equal(op.rc, -ECANCELED);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_is_url),
	    cmocka_unit_test(test_url_display_drops_query_and_userinfo),
	    cmocka_unit_test(test_s3_split_and_encode),
	    cmocka_unit_test(test_aws_environment),
	    cmocka_unit_test(test_aws_nothing_is_anonymous),
	    cmocka_unit_test(test_aws_profiles),
	    cmocka_unit_test(test_aws_refusals_name_no_secret),
	    cmocka_unit_test(test_scrub_removes_secrets),
	    cmocka_unit_test(test_client_refusals),
	    cmocka_unit_test(test_destroy_cancels_what_waits),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
