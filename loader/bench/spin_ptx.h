/* The compute stand-in of bench_loader and of the loader's GPU check
 * (tests/loader/gpu_loader_check.c): one thread spins until 'ns'
 * nanoseconds of %globaltimer passed (capped at 2^32 iterations, so a stuck
 * timer cannot hang anything). PTX text, JIT-loaded with
 * cuModuleLoadData(Ex), so no nvcc is needed at test time. PTX ISA 7.0 /
 * sm_52: JIT-compiled by any driver that runs an H100 (>= 520);
 * tests/loader/test_bench_loader_fake.sh assembles it with ptxas for sm_75,
 * sm_80 and sm_90 when the toolkit has ptxas. The fake driver runs it as a
 * sleep of its parameter. */
#ifndef BFS_LOADER_BENCH_SPIN_PTX_H
#define BFS_LOADER_BENCH_SPIN_PTX_H

/* Entry point BFS_SPIN_ENTRY, one .u64 parameter (nanoseconds); launch it
 * as one block of one thread. */
#define BFS_SPIN_ENTRY "bfs_bench_spin"
#define BFS_SPIN_PTX                                                           \
	".version 7.0\n"                                                       \
	".target sm_52\n"                                                      \
	".address_size 64\n"                                                   \
	"\n"                                                                   \
	".visible .entry bfs_bench_spin(.param .u64 bfs_bench_spin_ns)\n"      \
	"{\n"                                                                  \
	"\t.reg .pred %p<3>;\n"                                                \
	"\t.reg .b64 %rd<6>;\n"                                                \
	"\n"                                                                   \
	"\tld.param.u64 %rd1, [bfs_bench_spin_ns];\n"                          \
	"\tmov.u64 %rd2, %globaltimer;\n"                                      \
	"\tmov.u64 %rd5, 0;\n"                                                 \
	"$L_spin:\n"                                                           \
	"\tadd.u64 %rd5, %rd5, 1;\n"                                           \
	"\tsetp.ge.u64 %p2, %rd5, 4294967296;\n"                               \
	"\t@%p2 bra $L_done;\n"                                                \
	"\tmov.u64 %rd3, %globaltimer;\n"                                      \
	"\tsub.u64 %rd4, %rd3, %rd2;\n"                                        \
	"\tsetp.lt.u64 %p1, %rd4, %rd1;\n"                                     \
	"\t@%p1 bra $L_spin;\n"                                                \
	"$L_done:\n"                                                           \
	"\tret;\n"                                                             \
	"}\n"

#endif
