/// With `pipeline`, how many messages of a session may be unacknowledged at once: the sender
/// starts no message while this many await their ACKs, the receiver refuses a HEADER then, and
/// a HEADER of message m shows the receiver that its ACKs up to m − this arrived.
///
/// Two: one message on the air while the last one's ACK comes back hides the ACK's round trip
/// and the file work on both sides. Three was measured slower in the two-host lab (100 × 4 KiB,
/// four runs each way, alternating: 11.3–15.7 s against 9.3–11.9 s with two), where both
/// guests' one CPU is what bounds many small messages, not the link waiting for an ACK. A
/// hostile central can hold at most this many of the sender's messages, each under the
/// limits of a single one.
package enum PipelineWindow {
    package static let messages = 2
}
