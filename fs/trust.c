/* fs/trust: directories and files that are one user's alone (trust.h). */
#include "fs/trust.h"

bool bfs_trust_dir(const struct stat *st, uid_t uid, bool root_ok)
{
	return S_ISDIR(st->st_mode) &&
	       (st->st_uid == uid || (root_ok && st->st_uid == 0)) &&
	       (!(st->st_mode & (S_IWGRP | S_IWOTH)) ||
		(st->st_mode & S_ISVTX));
}

bool bfs_trust_file(const struct stat *st, uid_t uid)
{
	return S_ISREG(st->st_mode) && st->st_uid == uid &&
	       !(st->st_mode & (S_IWGRP | S_IWOTH)) && st->st_nlink == 1;
}
