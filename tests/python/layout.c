/*
 * The sizes and field offsets of pdx.h's structs, one "struct field offset"
 * line each ("struct - size" for the whole): what python/pdx/_ffi.py must
 * mirror (test_pdx.py compares).
 */
#include <stddef.h>
#include <stdio.h>

#include <pdx/pdx.h>

#define S(t) printf("%s - %zu\n", #t, sizeof(t))
#define F(t, f) printf("%s %s %zu\n", #t, #f, offsetof(t, f))

int main(void)
{
    S(pdx_config_t);
    F(pdx_config_t, log_level);
    F(pdx_config_t, listen);
    F(pdx_config_t, max_msg_size);
    F(pdx_config_t, ib_devices);
    F(pdx_config_t, tcp_staging_bytes);
    F(pdx_config_t, handshake_timeout_ms);
    S(pdx_buffer_desc_t);
    S(pdx_group_desc_t);
    F(pdx_group_desc_t, npages);
    F(pdx_group_desc_t, buffers);
    S(pdx_layout_desc_t);
    F(pdx_layout_desc_t, groups);
    S(pdx_pages_t);
    S(pdx_region_t);
    S(pdx_gate_t);
    F(pdx_gate_t, word);
    F(pdx_gate_t, value);
    S(pdx_stats_t);
    F(pdx_stats_t, handshakes_refused);
    S(pdx_engine_desc_info_t);
    F(pdx_engine_desc_info_t, port);
    S(pdx_mem_desc_info_t);
    F(pdx_mem_desc_info_t, len);
    F(pdx_mem_desc_info_t, flags);
    S(pdx_desc_t);
    S(pdx_xfer_entry_t);
    F(pdx_xfer_entry_t, remote);
    F(pdx_xfer_entry_t, remote_offset);
    F(pdx_xfer_entry_t, len);
    return 0;
}
