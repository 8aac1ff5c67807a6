/* A program built against an installed pdx, as a user would build it. */
#include <pdx/pdx.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    pdx_config_t cfg;

    if (pdx_config_init(&cfg) != PDX_OK || cfg.shards == 0)
        return 1;
    if (strcmp(pdx_status_str(PDX_ERR_AGAIN), "queue full, try again") != 0)
        return 1;
    printf("pdx %s\n", pdx_version());
    return 0;
}
