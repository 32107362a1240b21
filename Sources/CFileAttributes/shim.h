#ifndef BLETRANSFER_CFILEATTRIBUTES_SHIM_H
#define BLETRANSFER_CFILEATTRIBUTES_SHIM_H
/* Extended attributes (fsetxattr, getxattr): Glibc's Swift module does not include
 * <sys/xattr.h>. The received file keeps its authenticated sender's key line in one. */
#include <sys/types.h>
#include <sys/xattr.h>
#endif
