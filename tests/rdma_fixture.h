/*
 * What test_rdma.c and test_rdma_faults.c share beyond tp_fixture.h: the
 * softnic configurations their NICs start from.
 */
#ifndef PDX_TEST_RDMA_FIXTURE_H
#define PDX_TEST_RDMA_FIXTURE_H

#include "softnic.h"

#include <stdint.h>

/* The default NIC with `devices` devices (softnic0..) in `mode`. */
softnic_config_t fx_nic(uint32_t devices, softnic_mode_t mode);

/* Every WR waits delay_us before it executes (applies at once). */
void fx_nic_delay(softnic_config_t *c, uint32_t delay_us);

#endif
