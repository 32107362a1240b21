#ifndef BLETRANSFER_CDBUS_SHIM_H
#define BLETRANSFER_CDBUS_SHIM_H
#include <dbus/dbus.h>
#include <stdint.h>

// libdbus defines its type codes as char-literal casts (DBUS_TYPE_*), which Swift does not
// import; these constants carry the same values.
static const int CDBUS_TYPE_INVALID = 0;
static const int CDBUS_TYPE_BYTE = 'y';
static const int CDBUS_TYPE_BOOLEAN = 'b';
static const int CDBUS_TYPE_INT16 = 'n';
static const int CDBUS_TYPE_UINT16 = 'q';
static const int CDBUS_TYPE_INT32 = 'i';
static const int CDBUS_TYPE_UINT32 = 'u';
static const int CDBUS_TYPE_INT64 = 'x';
static const int CDBUS_TYPE_UINT64 = 't';
static const int CDBUS_TYPE_DOUBLE = 'd';
static const int CDBUS_TYPE_STRING = 's';
static const int CDBUS_TYPE_OBJECT_PATH = 'o';
static const int CDBUS_TYPE_SIGNATURE = 'g';
static const int CDBUS_TYPE_UNIX_FD = 'h';
static const int CDBUS_TYPE_ARRAY = 'a';
static const int CDBUS_TYPE_VARIANT = 'v';
static const int CDBUS_TYPE_STRUCT = 'r';
static const int CDBUS_TYPE_DICT_ENTRY = 'e';

#endif
