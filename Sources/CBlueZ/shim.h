#ifndef BLETRANSFER_CBLUEZ_SHIM_H
#define BLETRANSFER_CBLUEZ_SHIM_H
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>

/* The HCI ioctl numbers are function-like macros (_IOR) that Swift cannot import, and the
 * device-list request is a flexible-array struct; these helpers keep both on the C side. */

/* Lists the ids of the kernel's HCI devices into `ids` (at most `capacity`).
 * Returns the count, or -errno (-EAFNOSUPPORT when the kernel has no Bluetooth). */
static inline int bletransfer_hci_device_ids(uint16_t *ids, int capacity) {
    if (capacity <= 0 || capacity > HCI_MAX_DEV) capacity = HCI_MAX_DEV;
    int sk = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
    if (sk < 0) return -errno;
    size_t size = sizeof(struct hci_dev_list_req) + (size_t)capacity * sizeof(struct hci_dev_req);
    struct hci_dev_list_req *list = calloc(1, size);
    if (list == NULL) { close(sk); return -ENOMEM; }
    list->dev_num = (uint16_t)capacity;
    int result;
    if (ioctl(sk, HCIGETDEVLIST, (void *)list) < 0) {
        result = -errno;
    } else {
        result = list->dev_num;
        for (int i = 0; i < result; i++) ids[i] = list->dev_req[i].dev_id;
    }
    free(list);
    close(sk);
    return result;
}

/* Fills `info` for HCI device `dev_id`. Returns 0 or -errno. */
static inline int bletransfer_hci_device_info(uint16_t dev_id, struct hci_dev_info *info) {
    int sk = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
    if (sk < 0) return -errno;
    memset(info, 0, sizeof(*info));
    info->dev_id = dev_id;
    int result = ioctl(sk, HCIGETDEVINFO, (void *)info) < 0 ? -errno : 0;
    close(sk);
    return result;
}

static inline int bletransfer_hci_is_up(const struct hci_dev_info *info) {
    return hci_test_bit(HCI_UP, (void *)&info->flags) ? 1 : 0;
}

/* 1: LMP feature page 0 has "LE Supported (Controller)"; 0: it does not;
 * -1: the page is all zero (the controller was never initialised, so nothing is known). */
static inline int bletransfer_hci_le_feature(const struct hci_dev_info *info) {
    int any = 0;
    for (int i = 0; i < 8; i++) any |= info->features[i];
    if (!any) return -1;
    return (info->features[4] & LMP_LE) ? 1 : 0;
}

/* The device name ("hci0") as a NUL-terminated copy in `out` (at least 9 bytes). */
static inline void bletransfer_hci_name(const struct hci_dev_info *info, char *out) {
    memcpy(out, info->name, 8);
    out[8] = '\0';
}

/* "XX:XX:XX:XX:XX:XX" into `out` (at least 18 bytes). */
static inline void bletransfer_hci_address(const struct hci_dev_info *info, char *out) {
    ba2str(&info->bdaddr, out);
}

/* The bus the controller hangs on ("USB", "UART", "VIRTUAL"...), from libbluetooth. */
static inline const char *bletransfer_hci_bus(const struct hci_dev_info *info) {
    return hci_bustostr(info->type & 0x0f);
}

/* Socket helpers for NotificationSocket: ioctl is variadic and POLLRDHUP needs _GNU_SOURCE,
 * neither reaches Swift cleanly. */
#include <poll.h>
#include <linux/sockios.h>
#ifndef POLLRDHUP
#define POLLRDHUP 0x2000   /* Linux value; <poll.h> only defines it under _GNU_SOURCE */
#endif

/* Bytes sent on `fd` that the peer has not read yet (SIOCOUTQ), or -errno. */
static inline int bletransfer_socket_unsent_bytes(int fd) {
    int value = 0;
    if (ioctl(fd, SIOCOUTQ, &value) < 0) return -errno;
    return value;
}

/* 1 when the peer closed its end (POLLHUP / POLLRDHUP / POLLERR), 0 when not, -errno. */
static inline int bletransfer_socket_hung_up(int fd) {
    struct pollfd entry = { .fd = fd, .events = POLLRDHUP, .revents = 0 };
    int result = poll(&entry, 1, 0);
    if (result < 0) return -errno;
    return (entry.revents & (POLLHUP | POLLRDHUP | POLLERR)) ? 1 : 0;
}
/* The socket's pending error (SO_ERROR, which reading clears), or -errno. ECONNRESET on a
 * SOCK_SEQPACKET socket means the peer closed with packets of ours still unread. */
static inline int bletransfer_socket_take_error(int fd) {
    int value = 0;
    socklen_t size = sizeof(value);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &size) < 0) return -errno;
    return value;
}

/* LE credit-based L2CAP channels (the `l2cap` transport of framed version 2): socket set-up
 * whose structs (sockaddr_l2) and option levels Swift reaches poorly. Every call returns
 * -errno on failure. */
#include <fcntl.h>
#include <bluetooth/l2cap.h>

/* A non-blocking, close-on-exec LE L2CAP socket bound to `local` ("XX:XX:..."; NULL or "" for
 * any adapter) with `local_type` (BDADDR_LE_PUBLIC / BDADDR_LE_RANDOM) and PSM `psm` (0: the
 * kernel picks a free dynamic one at listen), its receive MTU set to `receive_mtu`. */
static inline int bletransfer_l2cap_le_socket(const char *local, uint8_t local_type, uint16_t psm, uint16_t receive_mtu) {
    int fd = socket(AF_BLUETOOTH, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, BTPROTO_L2CAP);
    if (fd < 0) return -errno;
    struct sockaddr_l2 address;
    memset(&address, 0, sizeof(address));
    address.l2_family = AF_BLUETOOTH;
    address.l2_bdaddr_type = local_type;
    address.l2_psm = htobs(psm);
    if (local != NULL && local[0] != '\0') {
        if (str2ba(local, &address.l2_bdaddr) < 0) { close(fd); return -EINVAL; }
    } else {
        bacpy(&address.l2_bdaddr, BDADDR_ANY);
    }
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0) { int e = errno; close(fd); return -e; }
    uint16_t mtu = receive_mtu;
    if (setsockopt(fd, SOL_BLUETOOTH, BT_RCVMTU, &mtu, sizeof(mtu)) < 0) { int e = errno; close(fd); return -e; }
    return fd;
}

/* listen(2), then the PSM the socket is bound to (the kernel's pick when it was bound to 0). */
static inline int bletransfer_l2cap_listen(int fd, int backlog, uint16_t *psm) {
    if (listen(fd, backlog) < 0) return -errno;
    struct sockaddr_l2 address;
    socklen_t size = sizeof(address);
    memset(&address, 0, sizeof(address));
    if (getsockname(fd, (struct sockaddr *)&address, &size) < 0) return -errno;
    *psm = btohs(address.l2_psm);
    return 0;
}

/* accept4(2) (non-blocking, close-on-exec): the new fd, the peer's address into `peer` (at
 * least 18 bytes) and its type. -EAGAIN when none is waiting. */
static inline int bletransfer_l2cap_accept(int fd, char *peer, uint8_t *peer_type) {
    struct sockaddr_l2 address;
    socklen_t size = sizeof(address);
    memset(&address, 0, sizeof(address));
    int client = accept4(fd, (struct sockaddr *)&address, &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return -errno;
    ba2str(&address.l2_bdaddr, peer);
    *peer_type = address.l2_bdaddr_type;
    return client;
}

/* connect(2) to `peer` of `peer_type` on `psm`: 0 when connected at once, -EINPROGRESS while
 * the channel is being set up (wait until writable, then read SO_ERROR). */
static inline int bletransfer_l2cap_connect(int fd, const char *peer, uint8_t peer_type, uint16_t psm) {
    struct sockaddr_l2 address;
    memset(&address, 0, sizeof(address));
    address.l2_family = AF_BLUETOOTH;
    address.l2_bdaddr_type = peer_type;
    address.l2_psm = htobs(psm);
    if (str2ba(peer, &address.l2_bdaddr) < 0) return -EINVAL;
    if (connect(fd, (struct sockaddr *)&address, sizeof(address)) < 0) return -errno;
    return 0;
}

/* The channel's receive and send MTU (the largest SDU each way). */
static inline int bletransfer_l2cap_mtus(int fd, uint16_t *receive, uint16_t *send) {
    socklen_t size = sizeof(*receive);
    if (getsockopt(fd, SOL_BLUETOOTH, BT_RCVMTU, receive, &size) < 0) return -errno;
    size = sizeof(*send);
    if (getsockopt(fd, SOL_BLUETOOTH, BT_SNDMTU, send, &size) < 0) return -errno;
    return 0;
}

/* Free room in a Bluetooth socket's send buffer: af_bluetooth answers TIOCOUTQ with
 * sk_sndbuf − the bytes still held for sending, not with the queued bytes as AF_UNIX does. */
static inline int bletransfer_bt_socket_free_send_space(int fd) {
    int value = 0;
    if (ioctl(fd, TIOCOUTQ, &value) < 0) return -errno;
    return value;
}

/* The kernel's management and HCI channels (mgmt-api.txt; hci_sock.c). Every call returns
 * -errno on failure. */
#ifndef HCI_CHANNEL_CONTROL
#define HCI_CHANNEL_CONTROL 3
#endif

/* A non-blocking, close-on-exec HCI socket bound to `channel` of controller `dev_id`. */
static inline int bletransfer_hci_bound_socket(uint16_t dev_id, uint16_t channel) {
    int fd = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, BTPROTO_HCI);
    if (fd < 0) return -errno;
    struct sockaddr_hci address;
    memset(&address, 0, sizeof(address));
    address.hci_family = AF_BLUETOOTH;
    address.hci_dev = dev_id;
    address.hci_channel = channel;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0) { int e = errno; close(fd); return -e; }
    return fd;
}

/* A socket on the management channel (HCI_CHANNEL_CONTROL), for every controller.
 * Unprivileged sockets may send the read commands only; the others are answered
 * "Permission Denied". */
static inline int bletransfer_mgmt_socket(void) {
    return bletransfer_hci_bound_socket(HCI_DEV_NONE, HCI_CHANNEL_CONTROL);
}

/* A non-blocking, close-on-exec raw HCI socket on controller `dev_id` that receives the LE
 * meta events and Disconnection Complete only, and may send commands. Needs CAP_NET_RAW for
 * both (without it the kernel's security filter passes no LE event). */
static inline int bletransfer_hci_event_socket(uint16_t dev_id) {
    int fd = bletransfer_hci_bound_socket(dev_id, HCI_CHANNEL_RAW);
    if (fd < 0) return fd;
    struct hci_filter filter;
    hci_filter_clear(&filter);
    hci_filter_set_ptype(HCI_EVENT_PKT, &filter);
    hci_filter_set_event(EVT_LE_META_EVENT, &filter);
    hci_filter_set_event(EVT_DISCONN_COMPLETE, &filter);
    hci_filter_set_event(EVT_CMD_STATUS, &filter);
    hci_filter_set_event(EVT_CMD_COMPLETE, &filter);
    if (setsockopt(fd, SOL_HCI, HCI_FILTER, &filter, sizeof(filter)) < 0) { int e = errno; close(fd); return -e; }
    return fd;
}

/* The kernel's LE connections on controller `dev_id`: handles and peer addresses (at most
 * `capacity`), through HCIGETCONNLIST, which needs no privilege. Returns the count. */
static inline int bletransfer_hci_le_connections(uint16_t dev_id, uint16_t *handles, char (*peers)[18],
                                                 uint8_t *outgoing, int capacity) {
    if (capacity <= 0) return 0;
    int sk = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI);
    if (sk < 0) return -errno;
    size_t size = sizeof(struct hci_conn_list_req) + (size_t)capacity * sizeof(struct hci_conn_info);
    struct hci_conn_list_req *list = calloc(1, size);
    if (list == NULL) { close(sk); return -ENOMEM; }
    list->dev_id = dev_id;
    list->conn_num = (uint16_t)capacity;
    int result;
    if (ioctl(sk, HCIGETCONNLIST, (void *)list) < 0) {
        result = -errno;
    } else {
        result = 0;
        for (int i = 0; i < list->conn_num; i++) {
            struct hci_conn_info *c = &list->conn_info[i];
            if (c->type != 0x80) continue;  /* LE_LINK in the kernel's hci.h */
            handles[result] = c->handle;
            ba2str(&c->bdaddr, peers[result]);
            outgoing[result] = c->out;
            result++;
        }
    }
    free(list);
    close(sk);
    return result;
}

#endif
