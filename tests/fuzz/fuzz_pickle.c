/* libFuzzer target: the restricted pickle VM over arbitrary bytes. Every
 * accepted result is checked against the invariants fs/dataset relies on
 * (geometry inside the storage, names set), and its metadata against
 * what dataset.json relies on: every value is one valid JSON value, the
 * whole within BFS_PICKLE_META_MAX. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool json_value(const char *s, size_t *i, int depth);

static void skip_sep(const char *s, size_t *i)
{
	while (s[*i] == ' ')
		(*i)++;
}

/* A JSON string at s + *i: no raw control bytes, valid escapes. */
static bool json_string(const char *s, size_t *i)
{
	if (s[(*i)++] != '"')
		return false;
	for (;;) {
		unsigned char c = (unsigned char)s[(*i)++];

		if (c == '"')
			return true;
		if (c < 0x20)
			return false;
		if (c != '\\')
			continue;
		c = (unsigned char)s[(*i)++];
		if (c == 'u') {
			for (int k = 0; k < 4; k++)
				if (!strchr("0123456789abcdefABCDEF", s[*i]) ||
				    !s[(*i)++])
					return false;
		} else if (!c || !strchr("\"\\/bfnrt", c))
			return false;
	}
}

static bool json_number(const char *s, size_t *i)
{
	size_t at = *i;

	if (s[*i] == '-')
		(*i)++;
	while (s[*i] >= '0' && s[*i] <= '9')
		(*i)++;
	if (s[*i] == '.') {
		(*i)++;
		while (s[*i] >= '0' && s[*i] <= '9')
			(*i)++;
	}
	if (s[*i] == 'e' || s[*i] == 'E') {
		(*i)++;
		if (s[*i] == '+' || s[*i] == '-')
			(*i)++;
		while (s[*i] >= '0' && s[*i] <= '9')
			(*i)++;
	}
	return *i > at && s[*i - 1] != '-';
}

/* A container: items (and keys, for an object) separated by ", ". */
static bool json_items(const char *s, size_t *i, int depth, bool object)
{
	char close = object ? '}' : ']';

	(*i)++;
	if (s[*i] == close) {
		(*i)++;
		return true;
	}
	for (;;) {
		if (object && (!json_string(s, i) || s[(*i)++] != ':'))
			return false;
		skip_sep(s, i);
		if (!json_value(s, i, depth + 1))
			return false;
		if (s[*i] == close) {
			(*i)++;
			return true;
		}
		if (s[(*i)++] != ',')
			return false;
		skip_sep(s, i);
	}
}

static bool json_value(const char *s, size_t *i, int depth)
{
	if (depth > 64)
		return false;
	switch (s[*i]) {
	case '"':
		return json_string(s, i);
	case '[':
		return json_items(s, i, depth, false);
	case '{':
		return json_items(s, i, depth, true);
	case 't':
		return !strncmp(s + *i, "true", 4) && (*i += 4);
	case 'f':
		return !strncmp(s + *i, "false", 5) && (*i += 5);
	case 'n':
		return !strncmp(s + *i, "null", 4) && (*i += 4);
	}
	return json_number(s, i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bfs_error err = {""};
	struct bfs_pickle_result r = {0};
	size_t text = 0;

	if (bfs_pickle_load(data, size, "fuzz.pkl", 0, &r, &err) != 0) {
		if (!err.msg[0]) /* every refusal says why */
			__builtin_trap();
		return 0;
	}
	for (size_t i = 0; i < r.n_tensors; i++) {
		const struct bfs_pickle_tensor *t = &r.tensors[i];
		if (!t->name || !t->storage_key || t->ndim < 0 ||
		    t->ndim > BFS_MAX_DIMS || !bfs_dtype_info(t->dtype))
			__builtin_trap();
	}
	for (size_t i = 0; i < r.n_meta; i++) {
		const struct bfs_pickle_meta *m = &r.meta[i];
		size_t at = 0;

		if (!m->key || !m->json || !m->what ||
		    !json_value(m->json, &at, 0) || m->json[at])
			__builtin_trap(); /* not one JSON value */
		text += strlen(m->key) + strlen(m->json) + strlen(m->what) + 3;
	}
	if (text > BFS_PICKLE_META_MAX)
		__builtin_trap();
	bfs_pickle_result_free(&r);
	return 0;
}
