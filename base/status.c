#include "pdx/pdx.h"

#define PDX_STR(x) #x
#define PDX_XSTR(x) PDX_STR(x)

const char *pdx_status_str(pdx_status_t status)
{
    switch (status) {
    case PDX_OK:              return "ok";
    case PDX_INPROGRESS:      return "in progress";
    case PDX_ERR_INVALID:     return "invalid argument";
    case PDX_ERR_NOMEM:       return "out of memory";
    case PDX_ERR_AGAIN:       return "queue full, try again";
    case PDX_ERR_TIMEOUT:     return "timed out";
    case PDX_ERR_NOT_FOUND:   return "not found";
    case PDX_ERR_EXISTS:      return "already exists";
    case PDX_ERR_RANGE:       return "out of range";
    case PDX_ERR_VERSION:     return "protocol version mismatch";
    case PDX_ERR_PEER:        return "peer gone";
    case PDX_ERR_PROTO:       return "malformed message";
    case PDX_ERR_IO:          return "i/o error";
    case PDX_ERR_UNSUPPORTED: return "unsupported";
    case PDX_ERR_ABORTED:     return "aborted";
    case PDX_ERR_NO_DEVICE:   return "no device";
    case PDX_ERR_FULL:        return "table full";
    case PDX_ERR_STATE:       return "wrong state";
    case PDX_ERR_AUTH:        return "not authenticated";
    case PDX_ERR_CORRUPT:     return "checksum mismatch";
    }
    return "unknown status";
}

const char *pdx_version(void)
{
    return PDX_XSTR(PDX_VERSION_MAJOR) "." PDX_XSTR(PDX_VERSION_MINOR) "." PDX_XSTR(PDX_VERSION_PATCH);
}
