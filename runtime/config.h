/*
 * The PDX_* table: one row per knob (name, default as text, help, field,
 * parser). pdx_config_init() walks it; pdx-info --config and the README
 * table are printed from it.
 */
#ifndef PDX_CONFIG_H
#define PDX_CONFIG_H

#include "pdx/pdx.h"

typedef struct pdx_config_row pdx_config_row_t;
typedef pdx_status_t (*pdx_config_parse_fn)(const pdx_config_row_t *row, const char *text,
                                             void *field, char *err, size_t errlen);

struct pdx_config_row {
    const char         *name;
    const char         *defval;
    const char         *help;
    uint64_t            bit;      /* PDX_CONFIG_FIELD_* */
    size_t              offset;   /* of the field in pdx_config_t */
    size_t              size;     /* of the field */
    pdx_config_parse_fn parse;
    int64_t             min, max; /* numbers */
    const char         *choices;  /* words, "|"-separated */
};

const pdx_config_row_t *pdx_config_table(size_t *nrows_p);

/* Defaults only, no environment. */
void pdx_config_defaults(pdx_config_t *cfg);

/* Defaults + environment, then every field of `user` whose bit is set. */
pdx_status_t pdx_config_resolve(const pdx_config_t *user, pdx_config_t *cfg);

/* Rules between fields (signal_every <= sq_depth / 2, ...). */
pdx_status_t pdx_config_check(const pdx_config_t *cfg, char *err, size_t errlen);

#endif
