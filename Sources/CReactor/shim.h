#ifndef BLETRANSFER_CREACTOR_SHIM_H
#define BLETRANSFER_CREACTOR_SHIM_H
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

// The readiness bits, as plain constants: glibc declares EPOLLIN and friends as enumerators
// of an anonymous enum whose Swift import differs between C libraries.
static const uint32_t CREACTOR_READABLE = EPOLLIN;
static const uint32_t CREACTOR_WRITABLE = EPOLLOUT;
static const uint32_t CREACTOR_ERROR = EPOLLERR;
static const uint32_t CREACTOR_HANGUP = EPOLLHUP | EPOLLRDHUP;
static const int CREACTOR_ADD = EPOLL_CTL_ADD;
static const int CREACTOR_MODIFY = EPOLL_CTL_MOD;
static const int CREACTOR_DELETE = EPOLL_CTL_DEL;

static inline int creactor_epoll_create(void) {
    return epoll_create1(EPOLL_CLOEXEC);
}

// The descriptor itself is the token: the reactor keeps one epoll registration per descriptor
// and fans its events out to the interests on it. (struct epoll_event is packed on x86-64,
// which Swift imports awkwardly; it never crosses into Swift.)
static inline int creactor_epoll_control(int epoll_fd, int operation, int fd, uint32_t events) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = 0;
    event.data.fd = fd;
    return epoll_ctl(epoll_fd, operation, fd, &event);
}

enum { CREACTOR_MAX_EVENTS = 64 };

// Waits as epoll_wait does and writes each ready descriptor and its events to the two arrays
// (each at least CREACTOR_MAX_EVENTS long). Returns the count, or -1 with errno set.
static inline int creactor_epoll_wait(int epoll_fd, int *fds, uint32_t *events, int timeout_ms) {
    struct epoll_event ready[CREACTOR_MAX_EVENTS];
    int count = epoll_wait(epoll_fd, ready, CREACTOR_MAX_EVENTS, timeout_ms);
    for (int index = 0; index < count; index++) {
        fds[index] = ready[index].data.fd;
        events[index] = ready[index].events;
    }
    return count;
}

static inline int creactor_eventfd_create(void) {
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

static inline void creactor_eventfd_signal(int fd) {
    uint64_t one = 1;
    ssize_t ignored = write(fd, &one, sizeof one);
    (void)ignored;  // EAGAIN: the counter is already non-zero, the reactor wakes anyway
}

static inline void creactor_eventfd_drain(int fd) {
    uint64_t value;
    ssize_t ignored = read(fd, &value, sizeof value);
    (void)ignored;
}

#endif
