/*
 * hip/smi.c (amd) against a fake rocm-smi-lib (fake_rocm_smi.c): every GPU
 * it lists is read and matched to a HIP device by PCI bus id, never by
 * index; a GPU it does not list keeps its sysfs facts; no library, a
 * library lacking a symbol and a failing rsmi_init are one info line each,
 * never an error; every rsmi_init is paired with rsmi_shut_down and the
 * library is closed; and without a GPU rocm-smi is never opened.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "hip/hip_api.h"
#include "log.h"
#include "hip/fake_rocm_smi.h"
#include "proc_usage.h"

__attribute__((visibility("default"))) fake_rsmi_t fake_rsmi;

static char logged[2048];

static void keep_lines(void *arg, pdx_log_level_t level, const char *engine, const char *message)
{
    size_t used = strlen(logged);

    (void)arg;
    (void)level;
    (void)engine;
    snprintf(logged + used, sizeof(logged) - used, "%s\n", message);
}

static void init(void)
{
    memset(&fake_rsmi, 0, sizeof(fake_rsmi));
    logged[0] = '\0';
    pdx_log_set_level(PDX_LOG_DEBUG);
    pdx_log_set_handler(keep_lines, NULL);
}

static void fini(void)
{
    pdx_log_set_handler(NULL, NULL);
    pdx_log_set_level(PDX_LOG_WARN);
}

TestSuite(hip_smi, .init = init, .fini = fini, .timeout = 30);

/* Three GPUs, listed in an order that is not the bus ids' (nor HIP's). */
static void three_gpus(void)
{
    fake_rsmi.count = 3;
    fake_rsmi.gpu[0] = (fake_rsmi_gpu_t){
        .bdfid = FAKE_BDFID(0, 0xc1, 0, 0), .numa_node = 1, .hive_id = 0x5eed0001,
        .name = "AMD Instinct MI300X",
    };
    fake_rsmi.gpu[1] = (fake_rsmi_gpu_t){
        .bdfid = FAKE_BDFID(0, 0x05, 0, 0), .numa_node = 0, .hive_id = 0x5eed0001,
        .name = "AMD Instinct MI300X",
    };
    /* domain 1, device 2, function 1, a ROCm 6 partition id in bits 31:28;
     * no node, no XGMI, and a name pci.ids did not know (the device id) */
    fake_rsmi.gpu[2] = (fake_rsmi_gpu_t){
        .bdfid = FAKE_BDFID(1, 0x85, 2, 1) | (3ull << 28), .numa_node = -1, .hive_id = 0,
        .name = "0x74a1",
    };
}

static void expect_closed(void)
{
    cr_expect_eq(fake_rsmi.loads, fake_rsmi.unloads, "%d loads, %d unloads: the library "
                 "is closed", fake_rsmi.loads, fake_rsmi.unloads);
    cr_expect_eq(fake_rsmi.inits, fake_rsmi.shut_downs, "%d rsmi_init, %d rsmi_shut_down",
                 fake_rsmi.inits, fake_rsmi.shut_downs);
    cr_expect_eq(fake_rsmi.outside, 0, "no call outside rsmi_init .. rsmi_shut_down");
}

Test(hip_smi, reads_every_gpu_with_its_bus_id)
{
    uint64_t errors = pdx_log_error_count();
    hipx_smi_facts_t facts;
    const hipx_smi_gpu_t *gpu;
    int before = proc_open_fds();

    three_gpus();
    cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK, "%s", logged);
    cr_assert_eq(facts.count, 3);
    /* the table keeps rocm-smi's order; the bus ids are decoded from the BDFID */
    cr_expect_str_eq(facts.gpu[0].pci_bus_id, "0000:c1:00.0");
    cr_expect_str_eq(facts.gpu[1].pci_bus_id, "0000:05:00.0");
    cr_expect_str_eq(facts.gpu[2].pci_bus_id, "0001:85:02.1", "partition bits masked off");

    gpu = hipx_smi_find(&facts, "0000:05:00.0");
    cr_assert_not_null(gpu);
    cr_expect_eq(gpu, &facts.gpu[1]);
    cr_expect_eq(gpu->numa_node, 0);
    cr_expect_eq(gpu->hive_id, 0x5eed0001);
    cr_expect_str_eq(gpu->name, "AMD Instinct MI300X");

    gpu = hipx_smi_find(&facts, "0001:85:02.1");
    cr_assert_not_null(gpu);
    cr_expect_eq(gpu->numa_node, -1, "rocm-smi's -1 (0xffffffff in 5.2's uint32_t) is no node");
    cr_expect_eq(gpu->hive_id, 0, "no XGMI: hive 0");
    cr_expect_str_eq(gpu->name, "", "a hex device id is no name");

    cr_expect_null(hipx_smi_find(&facts, "0000:42:00.0"));
    cr_expect_eq(fake_rsmi.inits, 1);
    expect_closed();
    cr_expect_eq(proc_open_fds(), before, "nothing stays open");
    cr_expect_eq(pdx_log_error_count(), errors);
    cr_expect_not_null(strstr(logged, "rocm-smi (" FAKE_RSMI_LIB "): 3 GPUs"), "%s", logged);
}

Test(hip_smi, matched_by_bus_id_not_index)
{
    hipx_smi_facts_t facts;
    /* HIP's device 0 is rocm-smi's GPU 1, and HIP's 1 its GPU 0 */
    pdx_hip_identity_t hip0 = {.device = 0, .numa_node = 7, .pci_bus_id = "0000:05:00.0",
                               .source = "sysfs"};
    pdx_hip_identity_t hip1 = {.device = 1, .numa_node = 7, .pci_bus_id = "0000:c1:00.0",
                               .source = "sysfs"};
    pdx_hip_identity_t hip2 = {.device = 2, .numa_node = 3, .pci_bus_id = "0001:85:02.1",
                               .source = "sysfs"};

    three_gpus();
    cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK);
    hipx_smi_apply(&facts, &hip0);
    cr_expect_eq(hip0.numa_node, 0, "rocm-smi's GPU 1, not its GPU 0 (node 1)");
    cr_expect_eq(hip0.hive_id, 0x5eed0001);
    cr_expect_str_eq(hip0.name, "AMD Instinct MI300X");
    cr_expect_str_eq(hip0.source, "rocm-smi");
    cr_expect_str_eq(hip0.pci_bus_id, "0000:05:00.0");
    hipx_smi_apply(&facts, &hip1);
    cr_expect_eq(hip1.numa_node, 1);
    cr_expect_str_eq(hip1.source, "rocm-smi");
    /* listed, but rocm-smi knows no node: sysfs's stays; no XGMI, no name */
    hipx_smi_apply(&facts, &hip2);
    cr_expect_eq(hip2.numa_node, 3);
    cr_expect_eq(hip2.hive_id, 0);
    cr_expect_str_eq(hip2.name, "");
    cr_expect_str_eq(hip2.source, "rocm-smi, NUMA node from sysfs");
}

Test(hip_smi, bus_id_not_listed_keeps_sysfs_facts)
{
    hipx_smi_facts_t facts;
    pdx_hip_identity_t id = {.device = 0, .numa_node = 2, .pci_bus_id = "0000:42:00.0",
                             .source = "sysfs"};
    pdx_hip_identity_t none = {.device = 1, .numa_node = -1, .pci_bus_id = "0000:43:00.0",
                               .source = "none"};

    three_gpus();
    cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK);
    hipx_smi_apply(&facts, &id);
    cr_expect_eq(id.numa_node, 2);
    cr_expect_eq(id.hive_id, 0);
    cr_expect_str_eq(id.name, "");
    cr_expect_str_eq(id.source, "sysfs");
    cr_expect_not_null(strstr(logged, "0000:42:00.0): not listed by rocm-smi"), "%s", logged);
    hipx_smi_apply(&facts, &none);
    cr_expect_eq(none.numa_node, -1);
    cr_expect_str_eq(none.source, "none");
}

Test(hip_smi, gpu_without_pci_id_is_left_out)
{
    hipx_smi_facts_t facts;

    three_gpus();
    fake_rsmi.gpu[0].pci_status = FAKE_RSMI_NOT_SUPPORTED;
    cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK);
    cr_expect_eq(facts.count, 2);
    cr_expect_null(hipx_smi_find(&facts, "0000:c1:00.0"));
    cr_expect_not_null(hipx_smi_find(&facts, "0000:05:00.0"));
    cr_expect_not_null(strstr(logged, "rocm-smi GPU 0: rsmi_dev_pci_id_get: rocm-smi status 2"),
                       "%s", logged);
    expect_closed();
}

Test(hip_smi, no_gpu_listed_is_an_empty_table)
{
    hipx_smi_facts_t facts = {.count = 99};

    cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK);
    cr_expect_eq(facts.count, 0);
    cr_expect_eq(fake_rsmi.inits, 1);
    expect_closed();
}

Test(hip_smi, missing_library_is_one_info_line)
{
    uint64_t errors = pdx_log_error_count(), warnings = pdx_log_warn_count();
    hipx_smi_facts_t facts = {.count = 99};
    int before = proc_open_fds();

    cr_expect_eq(hipx_smi_load("/nonexistent/librocm_smi64.so.1", &facts), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(facts.count, 99, "the output is written only on success");
    cr_expect_not_null(strstr(logged, "rocm-smi not used: /nonexistent/librocm_smi64.so.1"),
                       "%s", logged);
    cr_expect_not_null(strstr(logged, "NUMA nodes from sysfs"), "%s", logged);
    cr_expect_eq(pdx_log_error_count(), errors, "rocm-smi is optional: not an error");
    cr_expect_eq(pdx_log_warn_count(), warnings);
    cr_expect_eq(proc_open_fds(), before);
}

Test(hip_smi, library_lacking_a_symbol_is_not_used)
{
    uint64_t errors = pdx_log_error_count();
    hipx_smi_facts_t facts = {.count = 99};

    three_gpus();
    cr_expect_eq(hipx_smi_load(FAKE_RSMI_NOHIVE_LIB, &facts), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(facts.count, 99);
    cr_expect_not_null(strstr(logged, "lacks rsmi_dev_xgmi_hive_id_get"), "%s", logged);
    cr_expect_eq(fake_rsmi.loads, 1);
    cr_expect_eq(fake_rsmi.init_calls, 0, "every symbol is resolved before rsmi_init");
    cr_expect_eq(fake_rsmi.queries, 0);
    expect_closed();
    cr_expect_eq(pdx_log_error_count(), errors);
}

Test(hip_smi, rsmi_init_failing_is_not_used)
{
    uint64_t errors = pdx_log_error_count();
    hipx_smi_facts_t facts = {.count = 99};

    three_gpus();
    fake_rsmi.init_status = FAKE_RSMI_INIT_ERROR;
    cr_expect_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_ERR_IO);
    cr_expect_eq(facts.count, 99);
    cr_expect_not_null(strstr(logged, "rsmi_init: rocm-smi status 8; NUMA nodes from sysfs"),
                       "%s", logged);
    cr_expect_eq(fake_rsmi.init_calls, 1);
    cr_expect_eq(fake_rsmi.shut_downs, 0, "no rsmi_shut_down for an rsmi_init that failed");
    cr_expect_eq(fake_rsmi.queries, 0);
    expect_closed();
    cr_expect_eq(pdx_log_error_count(), errors);
}

Test(hip_smi, every_init_is_shut_down_and_closed)
{
    hipx_smi_facts_t facts;
    int before = proc_open_fds();

    three_gpus();
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(hipx_smi_load(FAKE_RSMI_LIB, &facts), PDX_OK);
        cr_assert_eq(fake_rsmi.loads, i + 1);
        cr_assert_eq(fake_rsmi.unloads, i + 1, "load %d left the library open", i);
        cr_assert_eq(fake_rsmi.shut_downs, fake_rsmi.inits);
    }
    cr_expect_eq(fake_rsmi.inits, 50);
    expect_closed();
    cr_expect_eq(proc_open_fds(), before);
}

Test(hip_smi, bad_arguments)
{
    cr_expect_eq(hipx_smi_load(FAKE_RSMI_LIB, NULL), PDX_ERR_INVALID);
    cr_expect_eq(fake_rsmi.loads, 0);
}

/* The public path on a machine without a GPU: rocm-smi is never opened. */
Test(hip_smi, not_opened_without_a_gpu)
{
    pdx_hip_identity_t id = {.device = 42};
    int n = -1;

    if (pdx_hip_device_count(&n) == PDX_OK)
        cr_skip_test("%d GPU(s) present: this test is about having none", n);
    three_gpus();
    hipx_smi_library_set(FAKE_RSMI_LIB);
    cr_expect_eq(pdx_hip_device_identity(0, &id), PDX_ERR_NO_DEVICE);
    cr_expect_eq(id.device, 42);
    cr_expect_eq(hipx_smi_facts()->count, 0);
    cr_expect_eq(hipx_smi_facts()->count, 0);
    cr_expect_eq(fake_rsmi.loads, 0, "rocm-smi was opened without a GPU");
    cr_expect_eq(fake_rsmi.init_calls, 0, "rsmi_init was called without a GPU");
    cr_expect_not_null(strstr(logged, "rocm-smi not opened: no GPU"), "%s", logged);
}

/* The rocm-smi this machine has, if any: whatever it answers, it is closed
 * again, nothing is logged as an error, and the process goes on. */
Test(hip_smi, installed_library_any_answer)
{
    uint64_t errors = pdx_log_error_count();
    hipx_smi_facts_t facts = {.count = 99};
    pdx_status_t st = hipx_smi_load(NULL, &facts);

    cr_log_info("installed rocm-smi: %s: %s", pdx_status_str(st), logged);
    cr_expect(st == PDX_OK || st == PDX_ERR_UNSUPPORTED || st == PDX_ERR_IO, "%s",
              pdx_status_str(st));
    if (st == PDX_OK)
        cr_expect_leq(facts.count, HIPX_SMI_MAX);
    else
        cr_expect_eq(facts.count, 99);
    cr_expect_eq(pdx_log_error_count(), errors);
}
