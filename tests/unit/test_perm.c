/* fs/perm: the read bits of a mount never let in a user who could not read
 * every source (checked against a brute-force model of Unix permissions
 * over every user and set of groups of a small universe), and lose nothing
 * needlessly for one source (its own read bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "fs/perm.h"

enum { USERS = 4, GROUPS = 3 };

/* Unix's one step for user x in the groups of bitmask gm (the model). An
 * object with an ACL may deny anyone but its owner. */
static bool model_may(const struct bfs_perm_obj *o, unsigned x, unsigned gm)
{
	unsigned bit = o->dir ? 1 : 4;

	if (o->uid == x)
		return (o->mode >> 6) & bit;
	if (o->acl)
		return false;
	if (gm & (1u << o->gid))
		return (o->mode >> 3) & bit;
	return o->mode & bit;
}

/* Whether a node of owner uid, group gid, read bits r lets x (groups gm)
 * read. */
static bool node_lets_in(uint32_t uid, uint32_t gid, uint32_t r, unsigned x,
			 unsigned gm)
{
	if (x == uid)
		return r & S_IRUSR;
	if (gm & (1u << gid))
		return r & S_IRGRP;
	return r & S_IROTH;
}

static unsigned rnd(unsigned *s, unsigned n)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 16) % n;
}

/* Random objects, a random owner and group: no user in any set of groups
 * is let in who fails an object (the owner's groups known, or not). The
 * owner's groups are drawn apart from the mount's group: an owner need
 * not be in it. */
static void no_bit_lets_in_a_user_who_could_not_read(void **state)
{
	unsigned seed = 7;
	struct bfs_perm_obj o[4];

	for (int trial = 0; trial < 20000; trial++) {
		size_t n = 1 + rnd(&seed, 4);
		uint32_t uid = rnd(&seed, USERS), gid = rnd(&seed, GROUPS);
		unsigned ogm = rnd(&seed, 1u << GROUPS); /* owner's groups */
		gid_t groups[GROUPS];
		size_t ng = 0;
		bool known = rnd(&seed, 2);
		uint32_t r;

		for (size_t i = 0; i < n; i++)
			o[i] = (struct bfs_perm_obj){.uid = rnd(&seed, USERS),
						     .gid = rnd(&seed, GROUPS),
						     .mode = rnd(&seed, 01000),
						     .acl = rnd(&seed, 8) == 0,
						     .dir = rnd(&seed, 2)};
		for (unsigned g = 0; known && g < GROUPS; g++)
			if (ogm & (1u << g))
				groups[ng++] = g;
		known = known && ng > 0;
		r = bfs_perm_bits(o, n, uid, gid, groups, known ? ng : 0);
		for (unsigned x = 0; x < USERS; x++)
			for (unsigned gm = 0; gm < (1u << GROUPS); gm++) {
				bool all = true;

				if (x == uid && known && gm != ogm)
					continue; /* the owner's groups are
						     known */
				if (!node_lets_in(uid, gid, r, x, gm))
					continue;
				for (size_t i = 0; i < n; i++)
					all = all && model_may(&o[i], x, gm);
				if (!all)
					fail_msg(
					    "trial %d: bits %o let in user %u "
					    "(groups %x) who cannot read",
					    trial, r, x, gm);
			}
	}
}

/* One file (in directories everyone may search): the mount has exactly
 * its read bits, for its owner and group. */
static void one_source_keeps_its_own_read_bits(void **state)
{
	struct bfs_perm_obj o[2] = {
	    {.uid = 5, .gid = 6, .dir = false},
	    {.uid = 0, .gid = 0, .mode = 0755, .dir = true},
	};
	gid_t g6[] = {6};

	for (uint32_t m = 0; m < 01000; m++) {
		o[0].mode = m;
		assert_int_equal(bfs_perm_bits(o, 2, 5, 6, g6, 1), m & 0444);
	}
}

/* A directory above the file that others may not search takes their
 * bit away; several files keep what all of them allow. */
static void directories_and_shards_narrow_the_bits(void **state)
{
	struct bfs_perm_obj o[3] = {
	    {.uid = 0, .gid = 0, .mode = 0644},
	    {.uid = 0, .gid = 0, .mode = 0700, .dir = true},
	    {.uid = 0, .gid = 0, .mode = 0640},
	};
	gid_t g0[] = {0};

	assert_int_equal(bfs_perm_bits(o, 1, 0, 0, g0, 1), 0444);
	assert_int_equal(bfs_perm_bits(o, 2, 0, 0, g0, 1), 0400);
	o[1].mode = 0755;
	assert_int_equal(bfs_perm_bits(o, 3, 0, 0, g0, 1), 0440);
	o[0].acl = true; /* an ACL: only its owner */
	assert_int_equal(bfs_perm_bits(o, 3, 0, 0, g0, 1), 0400);
	assert_ptr_equal(bfs_perm_denied(o, 3, 7, g0, 1), &o[0]);
	assert_null(bfs_perm_denied(o, 3, 0, g0, 1));
}

/* The owner's bit counts the groups the owner is in, which need not hold
 * the mount's group: a 0640 file of the owner's and a 0640 root file,
 * both of group 7, for owner 5 (in group 5 only) give 0040, and name the
 * root file as the one 5 may not read. Given group 7 too (what
 * getgrouplist(name, 7) returns whoever the user is) they would give
 * 0440: the caller must pass the user's real groups. */
static void owner_outside_the_group_keeps_no_bit(void **state)
{
	struct bfs_perm_obj o[2] = {
	    {.uid = 5, .gid = 7, .mode = 0640},
	    {.uid = 0, .gid = 7, .mode = 0640},
	};
	gid_t own[] = {5}, with_7[] = {5, 7};

	assert_int_equal(bfs_perm_bits(o, 2, 5, 7, own, 1), 0040);
	assert_ptr_equal(bfs_perm_denied(o, 2, 5, own, 1), &o[1]);
	assert_int_equal(bfs_perm_bits(o, 2, 5, 7, with_7, 2), 0440);
	/* groups unknown: group and other bits must both allow */
	assert_int_equal(bfs_perm_bits(o, 2, 5, 7, NULL, 0), 0040);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(no_bit_lets_in_a_user_who_could_not_read),
	    cmocka_unit_test(one_source_keeps_its_own_read_bits),
	    cmocka_unit_test(directories_and_shards_narrow_the_bits),
	    cmocka_unit_test(owner_outside_the_group_keeps_no_bit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
