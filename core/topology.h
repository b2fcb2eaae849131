/* topology.h — where plumb's threads run (hwloc). Threads are sized from
 * physical cores, not SMT siblings, within the CPUs the process may use
 * (affinity masks, cgroups). With several NUMA nodes, --numa picks a plan:
 *   off         no pinning (the OS decides)
 *   distribute  one thread per core on every node, numbered node by node,
 *               each pinned; the kernels' static row split then gives every
 *               node a contiguous slice of each matrix, and since the
 *               repacked weights are written by the same split (first
 *               touch), each node's threads read memory that node holds
 *   isolate     only the cores of one node (the one the process starts on)
 *   mirror      threads as distribute, and every repacked weight matrix
 *               copied once per node into that node's memory; each thread
 *               reads its own node's copy (memory x nodes, no remote reads)
 * Under distribute and mirror the KV cache is split by KV head into one part
 * per node, in that node's memory, and each node's threads attend over the
 * heads of their part (plumb_kv_partition), so decode reads no remote KV.
 * The plan is a pure function of a topology, so tests run it on synthetic
 * ones (e.g. "pack:2 numa:2 core:8 pu:2"). */
#ifndef PLUMB_TOPOLOGY_H
#define PLUMB_TOPOLOGY_H

#include <stddef.h>

#define PLUMB_MAX_THREADS 1024
#define PLUMB_MAX_NODES 64

typedef struct {
    char mode[16];
    int n_threads;
    int pu[PLUMB_MAX_THREADS];    /* OS index of the PU thread i is pinned to, -1 = not pinned */
    int node[PLUMB_MAX_THREADS];  /* NUMA node (logical index) of thread i, -1 = any */
    int n_nodes;                  /* NUMA nodes in the allowed set */
    int node_threads[PLUMB_MAX_NODES];
    int packages, cores, pus;     /* in the allowed set */
} plumb_placement;

/* synthetic: an hwloc synthetic description, or NULL for this machine.
 * requested: threads wanted (0 = one per physical core of the plan).
 * Returns 0, or -1 with an error (unknown mode, bad description). */
int plumb_topology_plan(const char *synthetic, const char *mode, int requested, plumb_placement *out);
/* Pins the OpenMP threads as planned (and sets their number). */
int plumb_topology_apply(const plumb_placement *p);
/* Binding memory to NUMA nodes: open the machine's topology once, bind the
 * pages of [addr, addr+len) to node `node` (logical index) before they are
 * first touched (0, or -1 where the OS or a one-node machine will not: the
 * memory then stays wherever the OS puts it), close. */
typedef struct plumb_numa plumb_numa;
plumb_numa *plumb_numa_open(void); /* NULL with an error */
int plumb_numa_bind(plumb_numa *n, void *addr, size_t len, int node);
void plumb_numa_close(plumb_numa *n);
/* The KV cache's split for plan p over n_head_kv heads: part i holds KV
 * heads head0[i] .. head0[i+1]-1 (in proportion to its node's threads),
 * lives on NUMA node node[i] and is attended over by threads thread0[i] ..
 * thread0[i+1]-1. Returns the number of parts: 1 (head0 = {0, n_head_kv},
 * every thread) unless p spreads its threads, node by node, over several
 * nodes. PLUMB_KV_SPLIT=<hwloc synthetic description> makes a context plan
 * its split on that topology without binding memory (a test hook: the
 * split layout on a one-node machine). */
int plumb_kv_partition(const plumb_placement *p, int n_head_kv, int *head0, int *thread0, int *node);
/* Physical cores this process may use (1 if unknown). */
int plumb_physical_cores(void);
/* Human-readable description of the topology and the plans. */
void plumb_topology_describe(const char *synthetic, char *buf, size_t n);

#endif
