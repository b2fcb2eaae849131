/* topology.c — see topology.h. */
#include "topology.h"

#include <hwloc.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static int load(hwloc_topology_t *t, const char *synthetic) {
    if (hwloc_topology_init(t)) return plumb_set_error("hwloc: cannot initialise");
    if (synthetic && hwloc_topology_set_synthetic(*t, synthetic)) {
        hwloc_topology_destroy(*t);
        return plumb_set_error("hwloc: bad synthetic topology '%s'", synthetic);
    }
    if (hwloc_topology_load(*t)) {
        hwloc_topology_destroy(*t);
        return plumb_set_error("hwloc: cannot read the topology");
    }
    return 0;
}

/* CPUs we may run on: the process binding, or everything for synthetic ones. */
static hwloc_bitmap_t allowed_set(hwloc_topology_t t, const char *synthetic) {
    hwloc_bitmap_t set = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(t));
    if (!synthetic) {
        hwloc_bitmap_t bound = hwloc_bitmap_alloc();
        if (hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(bound)) hwloc_bitmap_and(set, set, bound);
        hwloc_bitmap_free(bound);
    }
    return set;
}

int plumb_topology_plan(const char *synthetic, const char *mode, int requested, plumb_placement *out) {
    memset(out, 0, sizeof *out);
    if (!mode) mode = "off";
    if (strcmp(mode, "off") && strcmp(mode, "distribute") && strcmp(mode, "isolate") && strcmp(mode, "mirror"))
        return plumb_set_error("unknown --numa mode '%s' (off, distribute, isolate, mirror)", mode);
    const int spread = !strcmp(mode, "distribute") || !strcmp(mode, "mirror"); /* mirror places threads as distribute */
    snprintf(out->mode, sizeof out->mode, "%s", mode);
    hwloc_topology_t t;
    if (load(&t, synthetic)) return -1;
    hwloc_bitmap_t allowed = allowed_set(t, synthetic);
    const int n_nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    /* the node to isolate on: where PU 0 of the allowed set lives */
    int home = 0;
    hwloc_obj_t first_pu = hwloc_get_next_obj_inside_cpuset_by_type(t, allowed, HWLOC_OBJ_PU, NULL);
    for (int n = 0; first_pu && n < n_nodes; n++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)n);
        if (hwloc_bitmap_isset(node->cpuset, first_pu->os_index)) { home = n; break; }
    }
    out->packages = hwloc_get_nbobjs_inside_cpuset_by_type(t, allowed, HWLOC_OBJ_PACKAGE);
    out->pus = hwloc_get_nbobjs_inside_cpuset_by_type(t, allowed, HWLOC_OBJ_PU);
    /* cores node by node: core c of node n in the allowed set */
    int n_cores = 0;
    int core_pu[PLUMB_MAX_THREADS], core_node[PLUMB_MAX_THREADS];
    for (int n = 0; n < (n_nodes > 0 ? n_nodes : 1) && n < PLUMB_MAX_NODES; n++) {
        hwloc_obj_t node = n_nodes > 0 ? hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)n) : NULL;
        hwloc_bitmap_t in = hwloc_bitmap_dup(allowed);
        if (node) hwloc_bitmap_and(in, in, node->cpuset);
        int here = 0;
        for (hwloc_obj_t core = NULL; (core = hwloc_get_next_obj_inside_cpuset_by_type(t, in, HWLOC_OBJ_CORE, core)) && n_cores < PLUMB_MAX_THREADS;) {
            /* the first allowed PU of the core: SMT siblings get no thread */
            hwloc_bitmap_t cpus = hwloc_bitmap_dup(core->cpuset);
            hwloc_bitmap_and(cpus, cpus, in);
            const int pu = hwloc_bitmap_first(cpus);
            hwloc_bitmap_free(cpus);
            if (pu < 0) continue;
            core_pu[n_cores] = pu;
            core_node[n_cores] = n;
            n_cores++;
            here++;
        }
        if (here) out->n_nodes++;
        hwloc_bitmap_free(in);
    }
    out->cores = n_cores;
    if (n_cores == 0) { /* no core objects (odd systems): PUs stand in */
        out->cores = n_cores = out->pus < PLUMB_MAX_THREADS ? out->pus : PLUMB_MAX_THREADS;
        for (int i = 0; i < n_cores; i++) { core_pu[i] = -1; core_node[i] = 0; }
    }
    /* choose the cores the plan uses */
    int use[PLUMB_MAX_THREADS], n_use = 0;
    for (int i = 0; i < n_cores; i++)
        if (strcmp(mode, "isolate") || core_node[i] == home) use[n_use++] = i;
    int n = requested > 0 ? requested : n_use;
    if (n > PLUMB_MAX_THREADS) n = PLUMB_MAX_THREADS;
    /* with fewer threads than cores under distribute, spread them evenly
     * over the nodes, then keep node order */
    int pick[PLUMB_MAX_THREADS];
    if (spread && n < n_use && out->n_nodes > 1) {
        int taken[PLUMB_MAX_NODES] = {0}, k = 0;
        for (int round = 0; k < n; round++)
            for (int nd = 0; nd < PLUMB_MAX_NODES && k < n; nd++) {
                int seen = 0;
                for (int i = 0; i < n_use; i++)
                    if (core_node[use[i]] == nd && seen++ == round) { pick[k++] = use[i]; taken[nd]++; break; }
            }
        /* node order: sort picks by node (stable) */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && core_node[pick[j]] < core_node[pick[j - 1]]; j--) { int x = pick[j]; pick[j] = pick[j - 1]; pick[j - 1] = x; }
    } else {
        for (int i = 0; i < n; i++) pick[i] = use[i % (n_use ? n_use : 1)];
    }
    out->n_threads = n;
    for (int i = 0; i < n; i++) {
        const int c = pick[i];
        out->pu[i] = strcmp(mode, "off") ? core_pu[c] : -1;
        out->node[i] = strcmp(mode, "off") ? core_node[c] : -1;
        if (core_node[c] >= 0 && core_node[c] < PLUMB_MAX_NODES) out->node_threads[core_node[c]]++;
    }
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(t);
    return 0;
}

int plumb_topology_apply(const plumb_placement *p) {
    omp_set_num_threads(p->n_threads);
    if (!strcmp(p->mode, "off")) return 0;
    hwloc_topology_t t;
    if (load(&t, NULL)) return -1;
    int failed = 0;
#pragma omp parallel num_threads(p->n_threads) reduction(+ : failed)
    {
        const int i = omp_get_thread_num();
        if (p->pu[i] >= 0) {
            hwloc_bitmap_t set = hwloc_bitmap_alloc();
            hwloc_bitmap_only(set, (unsigned)p->pu[i]);
            failed += hwloc_set_cpubind(t, set, HWLOC_CPUBIND_THREAD) != 0;
            hwloc_bitmap_free(set);
        }
    }
    hwloc_topology_destroy(t);
    return failed ? plumb_set_error("could not pin %d threads", failed) : 0;
}

struct plumb_numa {
    hwloc_topology_t t;
    int n_nodes;
};

plumb_numa *plumb_numa_open(void) {
    plumb_numa *n = calloc(1, sizeof *n);
    if (!n) { plumb_set_error("out of memory"); return NULL; }
    if (load(&n->t, NULL)) { free(n); return NULL; }
    n->n_nodes = hwloc_get_nbobjs_by_type(n->t, HWLOC_OBJ_NUMANODE);
    return n;
}

int plumb_numa_bind(plumb_numa *n, void *addr, size_t len, int node) {
    hwloc_obj_t obj = n->n_nodes > 1 ? hwloc_get_obj_by_type(n->t, HWLOC_OBJ_NUMANODE, (unsigned)node) : NULL;
    return obj && hwloc_set_area_membind(n->t, addr, len, obj->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) == 0 ? 0 : -1;
}

void plumb_numa_close(plumb_numa *n) {
    if (!n) return;
    hwloc_topology_destroy(n->t);
    free(n);
}

int plumb_kv_partition(const plumb_placement *p, int n_head_kv, int *head0, int *thread0, int *node) {
    head0[0] = 0, head0[1] = n_head_kv, thread0[0] = 0, thread0[1] = p->n_threads, node[0] = 0;
    const int spread = !strcmp(p->mode, "distribute") || !strcmp(p->mode, "mirror");
    if (!spread || p->n_nodes < 2 || p->n_threads < 2) return 1;
    for (int i = 1; i < p->n_threads; i++)
        if (p->node[i] < p->node[i - 1] || p->node[i] < 0) return 1; /* threads not numbered node by node */
    int parts = 0;
    for (int i = 0; i < p->n_threads; i++)
        if (i == 0 || p->node[i] != p->node[i - 1]) {
            if (parts == PLUMB_MAX_NODES) return 1;
            thread0[parts] = i;
            node[parts++] = p->node[i];
        }
    if (parts < 2) return 1;
    thread0[parts] = p->n_threads;
    /* heads in proportion to threads, rounded at the cumulative boundaries */
    for (int i = 0; i <= parts; i++) head0[i] = (int)(((long)n_head_kv * thread0[i] + p->n_threads / 2) / p->n_threads);
    return parts;
}

int plumb_physical_cores(void) {
    static int cached;
    if (cached) return cached;
    plumb_placement p;
    cached = plumb_topology_plan(NULL, "off", 0, &p) == 0 && p.cores > 0 ? p.cores : 1;
    return cached;
}

void plumb_topology_describe(const char *synthetic, char *buf, size_t n) {
    plumb_placement p;
    size_t len = 0;
    buf[0] = 0;
    if (plumb_topology_plan(synthetic, "off", 0, &p)) {
        snprintf(buf, n, "%s\n", plumb_last_error());
        return;
    }
    len += (size_t)snprintf(buf + len, n - len, "topology (%s): %d package(s), %d NUMA node(s), %d physical cores, %d PUs usable\n",
                            synthetic ? synthetic : "this machine", p.packages, p.n_nodes, p.cores, p.pus);
    const char *modes[] = {"off", "distribute", "isolate", "mirror"};
    for (int m = 0; m < 4 && len < n; m++) {
        if (plumb_topology_plan(synthetic, modes[m], 0, &p)) continue;
        len += (size_t)snprintf(buf + len, n - len, "  --numa %-10s %d threads", modes[m], p.n_threads);
        if (strcmp(modes[m], "off")) {
            len += (size_t)snprintf(buf + len, n - len, ", per node:");
            for (int i = 0; i < PLUMB_MAX_NODES && len < n; i++)
                if (p.node_threads[i]) len += (size_t)snprintf(buf + len, n - len, " %d:%d", i, p.node_threads[i]);
            len += (size_t)snprintf(buf + len, n - len, ", pinned to PUs");
            for (int i = 0; i < p.n_threads && i < 16 && len < n; i++) len += (size_t)snprintf(buf + len, n - len, " %d", p.pu[i]);
            if (p.n_threads > 16) len += (size_t)snprintf(buf + len, n - len, " ...");
            if (!strcmp(modes[m], "mirror")) len += (size_t)snprintf(buf + len, n - len, "; %d weight copies", p.n_nodes > 1 ? p.n_nodes : 1);
            if (strcmp(modes[m], "isolate") && p.n_nodes > 1)
                len += (size_t)snprintf(buf + len, n - len, "; KV cache split by KV head into %d node-local parts", p.n_nodes);
        } else {
            len += (size_t)snprintf(buf + len, n - len, " (one per physical core, not pinned)");
        }
        if (len < n) len += (size_t)snprintf(buf + len, n - len, "\n");
    }
}
