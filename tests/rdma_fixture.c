/* The fixture of the rdma suites; see rdma_fixture.h. */
#include "rdma_fixture.h"

#include <criterion/criterion.h>

softnic_config_t fx_nic(uint32_t devices, softnic_mode_t mode)
{
    softnic_config_t c;

    softnic_config_default(&c);
    c.devices = devices;
    c.mode = mode;
    return c;
}

void fx_nic_delay(softnic_config_t *c, uint32_t delay_us)
{
    c->delay_us = delay_us;
    cr_assert_eq(softnic_configure(c), 0);
}
