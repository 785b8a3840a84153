/* fs/source: what a path given to `batchfs mount`, `inspect` or `pack`
 * holds, as tensors over read-only file mappings (fs/README.md: sources).
 *
 * Kinds, recognised by their first bytes (never by the file name):
 *   torch        a torch.save ZIP archive (fs/zip + fs/pickle)
 *   npz          a numpy.savez ZIP: each NAME.npy member is tensor NAME
 *   npy          one or more .npy files, or a directory of them: file
 *                NAME.npy is tensor NAME
 *   safetensors  a safetensors file: each entry is a tensor
 * One source is one shard of a dataset. It is made of parts (paths): one
 * archive / npz / safetensors file / directory, or a group of .npy files
 * (each may be given an explicit tensor name, as `pack NAME=FILE.npy`).
 *
 * Every tensor is described the same way whatever the kind: dtype, sizes,
 * strides and offset in elements, the storage bytes it may touch, and the
 * byte order. fs/dataset binds rows over them; nothing here copies data.
 * Fortran-order .npy arrays are described by their strides; big-endian
 * .npy arrays and torch archives whose byteorder record says "big" are
 * marked big_endian (swapped by the gather).
 *
 * Everything read here is untrusted: headers are parsed by fs/zip,
 * fs/pickle, fs/npy and fs/safetensors, every size is checked with fs/size,
 * every refusal names the file, the byte offset and the reason. */
#ifndef BFS_SOURCE_H
#define BFS_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "fs/dtype.h"
#include "fs/error.h"
#include "fs/pickle.h"

struct bfs_zip;
struct bfs_object;
struct bfs_objects;

enum bfs_source_kind {
	BFS_SOURCE_TORCH,
	BFS_SOURCE_NPZ,
	BFS_SOURCE_NPY,
	BFS_SOURCE_SAFETENSORS,
};

/* One path of a source: 'name' names the tensor of a .npy file (NULL: its
 * file name without ".npy"); ignored for the other kinds. */
struct bfs_source_part {
	const char *path;
	const char *name;
};

/* A file a source reads, mapped read-only whole. */
struct bfs_source_file {
	char *path;
	int fd; /* -1 when the bytes were given in memory */
	const uint8_t *map;
	uint64_t size; /* bytes mapped = the file's size at open */
	bool owned;    /* mapped here (else by 'zip', or caller memory) */
	/* What the file was at open (fstat of fd), to tell when its bytes
	 * change under a mount: a write or truncation moves st_mtime (the
	 * gather compares it, fs/README.md: a source that changes). */
	struct timespec mtime;
	uint64_t dev, ino;
	uint32_t uid, gid, mode; /* owner, group, permission bits */
	/* A remote source (s3://, http(s)://): the object whose cache file
	 * is mapped (path is its name for users, fd the cache file, neither
	 * mtime nor the owner's bits say anything of it). Only the bytes
	 * fetched are there, a hole reads as zeros: at open, the parsers
	 * read only what bfs_source_ensure made readable (the rest of the
	 * mapping faults until bfs_source_unguard); after it, rows are read
	 * only while fs/fetch holds them. NULL: a local file, or bytes in
	 * memory. Tested by bfs_source_file_remote and _local; past
	 * fs/source_file, only fs/fetch_remote uses the object itself. */
	struct bfs_object *remote;
	bool guarded; /* mapped PROT_NONE but for what was ensured */
};

/* Whether file f is a local file, read through its own descriptor 'fd':
 * neither bytes in memory (fd < 0) nor a remote object's cache file. Only
 * such a file has what the rooms above look at: an owner and mode bits
 * (fs/perm), an mtime and a size that move when it changes (fs/gather),
 * pages the memory policy reads in or advises (fs/memory), bytes read by
 * pread (a file cut short: an error, not a SIGBUS). */
static inline bool bfs_source_file_local(const struct bfs_source_file *f)
{
	return f->fd >= 0 && !f->remote;
}

/* Whether file f is a remote object's cache file ('remote'): its rows
 * are read only while fs/fetch holds them, until it is sealed. */
static inline bool bfs_source_file_remote(const struct bfs_source_file *f)
{
	return f->remote != NULL;
}

/* Whether file f is a remote object's cache file whose object is sealed
 * (fs/remote/object: every byte in the cache, kept there until
 * unmounted): from then on its rows are in the mapping for good, as a
 * local file's are, and need no hold. Once true, true until closed. */
bool bfs_source_file_sealed(const struct bfs_source_file *f);

struct bfs_source_tensor {
	char *name;
	enum bfs_dtype dtype;
	int ndim;
	int64_t size[BFS_MAX_DIMS];
	int64_t stride[BFS_MAX_DIMS]; /* in elements */
	uint64_t offset;	      /* in elements, from 'data' */
	const uint8_t *data;	      /* its storage, inside files[file] */
	uint64_t data_bytes;	      /* bytes of storage from 'data' */
	size_t file;		      /* index in the source's files */
	bool big_endian;	      /* elements stored big-endian */
	char *store; /* the storage as named in refusals ("record 'x'") */
	uint64_t store_off; /* file offset of its description */
	bool left_out;	    /* while --fields is applied: not selected */
};

/* A value of a source that is not served (metadata; fs/README.md:
 * metadata): a torch archive's values beside its tensors, a 0-dim tensor
 * of any kind (it has no sample dimension), and a tensor whose first
 * dimension is not the source's sample count (fs/README.md: the sample
 * count). */
struct bfs_source_meta {
	char *key;  /* key path ("classes", "train.info") or tensor name */
	char *json; /* its value as JSON ("[\"a\", \"b\"]", "0.5") */
	char *what; /* for messages: "a list", "a 0-dim tensor" */
};

struct bfs_source {
	enum bfs_source_kind kind;
	char *path;		       /* first part's path */
	struct bfs_source_file *files; /* [nfiles] */
	size_t nfiles;
	struct bfs_source_tensor *tensors; /* [ntensors], source order;
					    * none 0-dim (metadata) */
	size_t ntensors;
	uint64_t samples;     /* the first dimension its fields share */
	size_t nmeta_tensors; /* tensors of another first dim: metadata */
	uint64_t meta_bytes;  /* heap held: charged to a dataset's budget */
	struct bfs_source_meta *meta; /* [nmeta], source order */
	size_t nmeta;
	size_t nmeta_dropped; /* more, past BFS_PICKLE_META_MAX: counted */
	/* What inspect describes, by kind (NULL / zero otherwise): */
	struct bfs_zip *zip;	     /* torch, npz: the archive (owned) */
	struct bfs_pickle_result pk; /* torch: the tensors as pickled */
	int version;		     /* torch: the version record */
	bool big_endian;	     /* torch: byteorder record "big" */
	/* Private to fs/source: where URLs are opened (NULL: refused). */
	struct bfs_objects *objects;
};

/* Open the 'n' parts of one source. A torch archive, an npz, a
 * safetensors file or a directory must be the only part; several parts
 * must all be .npy files. Tensor names must be unique. 0-dim tensors
 * become metadata (their value read); so do tensors whose first dimension
 * is not the sample count (the first dimension shared by the most fields
 * too large to be metadata, then by the most fields; a tie is refused
 * naming the fields and the --fields to give: fs/README.md, the sample
 * count), their values read when small. The
 * metadata is named in one warning line. 'mem_limit' bounds the metadata
 * (pickle VM, tables) this source may allocate.
 * Returns 0 and *out, or -errno with 'err' naming the file, offset and
 * reason. Cost: maps each file, parses its headers; reads the element of
 * each 0-dim tensor, no other data. */
int bfs_source_open(struct bfs_source **out,
		    const struct bfs_source_part *parts, size_t n,
		    uint64_t mem_limit, struct bfs_error *err);

/* bfs_source_open where a part may be a URL (s3://, http://, https://):
 * its object opened in 'objects' (fs/remote/object; NULL: a URL is refused),
 * only its structure fetched: the first bytes, the ZIP end records and
 * central directory, the local headers, data.pkl and the small records,
 * each .npy and safetensors header, 0-dim tensors. No row. */
int bfs_source_open_in(struct bfs_source **out,
		       const struct bfs_source_part *parts, size_t n,
		       uint64_t mem_limit, struct bfs_objects *objects,
		       struct bfs_error *err);

/* bfs_source_open_in with only the fields 'fields' selects served (NULL:
 * all; bfs_source_select says how): the sample count is the one the
 * selected fields share, and the tensors left out whose first dimension
 * is not it are metadata as above (a mean stays in dataset.json); those
 * of the sample count are fields left out, not served. */
int bfs_source_open_select(struct bfs_source **out,
			   const struct bfs_source_part *parts, size_t n,
			   uint64_t mem_limit, struct bfs_objects *objects,
			   const char *fields, struct bfs_error *err);

/* Make bytes [off, off + len) of file 'file' of s readable: for a remote
 * file, fetched (if absent) and kept in the cache while the source is
 * open, and readable in its mapping; nothing for a local one. Every
 * reader of a remote file's bytes at open calls it first (the parsers,
 * the ragged offsets' check). 0 or -errno with 'err'. */
int bfs_source_ensure(struct bfs_source *s, size_t file, uint64_t off,
		      uint64_t len, struct bfs_error *err);

/* The source is open and checked: the mappings of its remote files
 * become readable whole (what is read from now on is held by fs/fetch
 * first). Accepts NULL. */
void bfs_source_unguard(struct bfs_source *s);

/* Same over caller memory [buf, buf+size) holding one file of any kind
 * but a directory ('label' names it). The memory must outlive the source.
 * Used by fuzz targets. */
int bfs_source_open_mem(struct bfs_source **out, const uint8_t *buf,
			uint64_t size, const char *label, uint64_t mem_limit,
			struct bfs_error *err);

/* Select the tensors that 'fields' (ITEM[,ITEM...], ITEM = NAME or
 * NAME=NEWNAME) selects: a tensor named NAME, or a ragged pair
 * NAME.values + NAME.offsets, keeps its name; the tensors under NAME
 * (named NAME.REST: a nested dict of a torch archive, a dotted
 * safetensors name) are kept as REST. With =NEWNAME, NEWNAME replaces
 * NAME instead (NEWNAME, NEWNAME.values, NEWNAME.REST); the others are
 * marked left_out (bfs_source_open_select then drops them or makes them
 * metadata). 0, or -EINVAL
 * with 'err' when a NAME selects nothing (naming what there is, or what
 * the metadata NAME is) or two selected tensors would share a name
 * (naming both ITEMs). */
int bfs_source_select(struct bfs_source *s, const char *fields,
		      struct bfs_error *err);

/* Unmap and free; accepts NULL and half-built sources. */
void bfs_source_close(struct bfs_source *s);

/* Whether a source path names a remote object (s3://, http://, https://:
 * the remote wing's bfs_remote_is_url), for the rooms above that name
 * sources without the wing's headers (fs/text). */
bool bfs_source_path_is_url(const char *path);

/* Whether a file system of type 'f_type' (statfs) has a server of its
 * own, which may refuse a read the local mode bits allow, or answer a
 * read short in the middle of a file (a FUSE server: the kernel then
 * takes it for the end of the file and zero-fills the rest of the page):
 * NFS, SMB, FUSE, 9P, Ceph, AFS, GPFS, Lustre. */
bool bfs_source_fs_remote(long f_type);

/* The file open as 'fd' opened again, read-only with 'flags' added
 * (O_DIRECT, say), through /proc/self/fd: a descriptor of its own (file
 * position, read-ahead state, flags) on the same file, even when its path
 * now names another. -1 with errno set when fd < 0 or the open fails. */
int bfs_source_reopen(int fd, int flags);

/* "torch", "npz", "npy", "safetensors". */
const char *bfs_source_kind_name(enum bfs_source_kind k);

/* Split the paths of a command line into sources (shards): each torch
 * archive, npz, safetensors file or directory is one source; a run of
 * .npy files is one source, whose tensors they are, until a tensor name
 * comes again (then the next source starts). *parts gets the n paths as
 * parts (names NULL), *first[i] .. *first[i+1] the parts of source i
 * (*nsources + 1 entries). Reads each file's first bytes.
 * Returns 0 or -errno with 'err' (a path that cannot be opened). */
int bfs_source_group(const char *const *paths, size_t n,
		     struct bfs_source_part **parts, size_t **first,
		     size_t *nsources, struct bfs_error *err);
/* The same where a path may be a URL (opened in 'objects', its first
 * bytes fetched). */
int bfs_source_group_in(const char *const *paths, size_t n,
			struct bfs_objects *objects,
			struct bfs_source_part **parts, size_t **first,
			size_t *nsources, struct bfs_error *err);

#endif
