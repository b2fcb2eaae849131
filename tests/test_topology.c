/* Thread placement plans on synthetic hwloc topologies (this machine has a
 * single NUMA node, so the interesting cases are made up). */
#include "../core/topology.h"
#include "../core/util.h"
#include "helpers.h"

#define BIG "pack:2 numa:2 core:8 pu:2" /* 2 packages x 2 nodes x 8 cores x 2 SMT = 32 cores, 64 PUs */

Test(topology, counts_physical_cores_not_smt_siblings) {
    plumb_placement p;
    cr_assert_eq(plumb_topology_plan(BIG, "off", 0, &p), 0, "%s", plumb_last_error());
    cr_expect_eq(p.packages, 2);
    cr_expect_eq(p.n_nodes, 4);
    cr_expect_eq(p.cores, 32);
    cr_expect_eq(p.pus, 64);
    cr_expect_eq(p.n_threads, 32, "one thread per core, not per PU");
    for (int i = 0; i < p.n_threads; i++) cr_expect_eq(p.pu[i], -1, "off pins nothing");
}

Test(topology, distribute_orders_threads_node_by_node) {
    plumb_placement p;
    cr_assert_eq(plumb_topology_plan(BIG, "distribute", 0, &p), 0);
    cr_expect_eq(p.n_threads, 32);
    for (int n = 0; n < 4; n++) cr_expect_eq(p.node_threads[n], 8);
    int seen[128] = {0};
    for (int i = 0; i < 32; i++) {
        cr_expect_eq(p.node[i], i / 8, "thread %d on node %d", i, p.node[i]);
        cr_assert(p.pu[i] >= 0 && p.pu[i] < 128);
        cr_expect_eq(p.pu[i] % 2, 0, "first PU of each core (SMT siblings stay free)");
        cr_expect_eq(seen[p.pu[i]]++, 0, "PU %d used twice", p.pu[i]);
    }
}

Test(topology, distribute_spreads_fewer_threads_over_all_nodes) {
    plumb_placement p;
    cr_assert_eq(plumb_topology_plan(BIG, "distribute", 6, &p), 0);
    cr_expect_eq(p.n_threads, 6);
    cr_expect_eq(p.node_threads[0], 2);
    cr_expect_eq(p.node_threads[1], 2);
    cr_expect_eq(p.node_threads[2], 1);
    cr_expect_eq(p.node_threads[3], 1);
    for (int i = 1; i < 6; i++) cr_expect_geq(p.node[i], p.node[i - 1], "node order kept");
}

Test(topology, mirror_places_threads_as_distribute) {
    plumb_placement d, m;
    cr_assert_eq(plumb_topology_plan(BIG, "distribute", 6, &d), 0);
    cr_assert_eq(plumb_topology_plan(BIG, "mirror", 6, &m), 0, "%s", plumb_last_error());
    cr_expect_eq(m.n_threads, d.n_threads);
    cr_expect_eq(m.n_nodes, 4, "one weight copy per node");
    for (int i = 0; i < m.n_threads; i++) {
        cr_expect_eq(m.pu[i], d.pu[i]);
        cr_expect_eq(m.node[i], d.node[i]);
    }
}

Test(topology, isolate_stays_on_one_node) {
    plumb_placement p;
    cr_assert_eq(plumb_topology_plan(BIG, "isolate", 0, &p), 0);
    cr_expect_eq(p.n_threads, 8);
    for (int i = 0; i < 8; i++) cr_expect_eq(p.node[i], 0);
}

Test(topology, single_node_machine_and_bad_input) {
    plumb_placement p;
    cr_assert_eq(plumb_topology_plan("core:4 pu:2", "distribute", 0, &p), 0);
    cr_expect_eq(p.n_threads, 4);
    cr_expect_eq(p.n_nodes, 1);
    cr_expect_neq(plumb_topology_plan(BIG, "mirror-ish", 0, &p), 0);
    cr_expect(strstr(plumb_last_error(), "unknown --numa mode") != NULL);
    cr_expect_neq(plumb_topology_plan("this is not hwloc", "off", 0, &p), 0);
    cr_assert_eq(plumb_topology_plan(NULL, "off", 0, &p), 0, "this machine: %s", plumb_last_error());
    cr_expect_geq(p.cores, 1);
}

Test(topology, kv_cache_split_by_head_over_the_nodes) {
    plumb_placement p;
    int head0[PLUMB_MAX_NODES + 1], thread0[PLUMB_MAX_NODES + 1], node[PLUMB_MAX_NODES];
    /* 4 nodes x 8 threads, 32 KV heads: 8 heads a node, node by node */
    cr_assert_eq(plumb_topology_plan(BIG, "distribute", 0, &p), 0);
    cr_assert_eq(plumb_kv_partition(&p, 32, head0, thread0, node), 4);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(head0[i], 8 * i);
        cr_expect_eq(thread0[i], 8 * i);
        cr_expect_eq(node[i], i);
        for (int t = thread0[i]; t < thread0[i + 1]; t++) cr_expect_eq(p.node[t], node[i], "thread %d attends over a part of another node", t);
    }
    cr_expect_eq(head0[4], 32);
    cr_expect_eq(thread0[4], 32);
    /* 6 threads spread 2,2,1,1 over the nodes, 8 KV heads (Llama-3 8B): heads in proportion, every head once */
    cr_assert_eq(plumb_topology_plan(BIG, "mirror", 6, &p), 0);
    cr_assert_eq(plumb_kv_partition(&p, 8, head0, thread0, node), 4);
    const int want_threads[5] = {0, 2, 4, 5, 6}, want_heads[5] = {0, 3, 5, 7, 8};
    for (int i = 0; i <= 4; i++) {
        cr_expect_eq(thread0[i], want_threads[i], "part %d starts at thread %d", i, thread0[i]);
        cr_expect_eq(head0[i], want_heads[i], "part %d starts at head %d", i, head0[i]);
    }
    /* no split: off, isolate, one node, one thread */
    const char *modes[] = {"off", "isolate"};
    for (int m = 0; m < 2; m++) {
        cr_assert_eq(plumb_topology_plan(BIG, modes[m], 0, &p), 0);
        cr_expect_eq(plumb_kv_partition(&p, 32, head0, thread0, node), 1, "%s splits the KV cache", modes[m]);
        cr_expect(head0[0] == 0 && head0[1] == 32);
    }
    cr_assert_eq(plumb_topology_plan("numa:1 core:4 pu:1", "distribute", 0, &p), 0);
    cr_expect_eq(plumb_kv_partition(&p, 4, head0, thread0, node), 1);
    cr_assert_eq(plumb_topology_plan(BIG, "distribute", 1, &p), 0);
    cr_expect_eq(plumb_kv_partition(&p, 4, head0, thread0, node), 1);
}

Test(topology, describe_says_the_kv_cache_is_split) {
    char buf[4096];
    plumb_topology_describe(BIG, buf, sizeof buf);
    cr_expect(strstr(buf, "KV cache split by KV head into 4 node-local parts") != NULL, "%s", buf);
}
