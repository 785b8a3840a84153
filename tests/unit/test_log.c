/* fs/log: a log line is one line whatever its message quotes: control
 * characters (C0, DEL, C1, bytes that are not UTF-8) are escaped, the
 * rest of UTF-8 and the module prefix are kept, and an escape is never
 * cut in half. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "fs/log.h"

static char captured[2048];

static void capture(enum bfs_log_level level, const char *line)
{
	snprintf(captured, sizeof(captured), "%s", line);
}

static void control_characters_are_escaped(void **state)
{
	char out[256];

	assert_string_equal(bfs_log_escape(out, sizeof(out), "a\nb\rc\td"),
			    "a\\nb\\rc\\td");
	assert_string_equal(bfs_log_escape(out, sizeof(out), "\x1b[2J\x7f\x01"),
			    "\\x1b[2J\\x7f\\x01");
	/* C1 as UTF-8 (U+009B, CSI) and as a raw byte: escaped */
	assert_string_equal(bfs_log_escape(out, sizeof(out),
					   "\xc2\x9b"
					   "1m\x9b"),
			    "\\xc2\\x9b1m\\x9b");
	/* not UTF-8: a lone lead, an overlong '/', a surrogate */
	assert_string_equal(bfs_log_escape(out, sizeof(out),
					   "\xe9t\xc0\xaf"
					   "\xed\xa0\x80"),
			    "\\xe9t\\xc0\\xaf\\xed\\xa0\\x80");
}

static void text_and_utf8_are_kept(void **state)
{
	char out[256];
	const char *s = "/data/caf\xc3\xa9/\xe6\x95\xb0\xe6\x8d\xae "
			"\xf0\x9f\x98\x80 a\\nb [x]: 50%";

	assert_string_equal(bfs_log_escape(out, sizeof(out), s), s);
}

static void escapes_are_never_cut(void **state)
{
	char out[6];

	/* "ab\x1b" needs 6 bytes and a NUL: only "ab" fits */
	assert_string_equal(bfs_log_escape(out, sizeof(out), "ab\x1b"), "ab");
	assert_string_equal(bfs_log_escape(out, 4, "\xc3\xa9\xc3\xa9"),
			    "\xc3\xa9");
	assert_string_equal(bfs_log_escape(out, 1, "abc"), "");
}

/* A file name that would be a line of its own stays in its line, after
 * the prefix the daemon writes. */
static void a_log_line_is_one_line(void **state)
{
	bfs_log_setup(BFS_LOG_INFO, capture);
	bfs_log(BFS_LOG_ERR, "mount", "cannot open %s: %s",
		"x.pt\n2030-01-01T00:00:00.000Z batchfs[mount]: fake",
		"No such file");
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_string_equal(captured,
			    "batchfs[mount]: cannot open x.pt\\n2030-01-01T00:"
			    "00:00.000Z batchfs[mount]: fake: No such file");
	assert_string_equal(bfs_log_err_last(),
			    captured + strlen("batchfs[mount]: "));
}

/* The first size - 1 bytes of s in b, as snprintf leaves a cut one. */
static void cut(char *b, size_t size, const char *s)
{
	memcpy(b, s, size - 1);
	b[size - 1] = '\0';
}

/* A reason cut by snprintf ends in "..." after a whole character. */
static void a_cut_reason_ends_visibly_on_a_character(void **state)
{
	char b[9];

	(void)state;
	for (size_t size = 8; size <= 9; size++) { /* cut in, after an e' */
		cut(b, size, "ab\u00e9\u00e9\u00e9\u00e9");
		bfs_log_ellipsize(b, size);
		assert_string_equal(b, "ab\u00e9...");
	}
	cut(b, sizeof(b), "abcdefghij");
	bfs_log_ellipsize(b, sizeof(b));
	assert_string_equal(b, "abcde...");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(control_characters_are_escaped),
	    cmocka_unit_test(text_and_utf8_are_kept),
	    cmocka_unit_test(escapes_are_never_cut),
	    cmocka_unit_test(a_log_line_is_one_line),
	    cmocka_unit_test(a_cut_reason_ends_visibly_on_a_character),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
