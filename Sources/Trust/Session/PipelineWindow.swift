/// With `pipeline`, how many messages may be unacknowledged at once: the sender starts none while this many await
/// ACKs, the receiver refuses a HEADER then, and a HEADER of message m shows the receiver its ACKs up to m − this
/// arrived. A hostile central holds at most this many.
///
/// Two hides the ACK's round trip and both sides' file work. Three was slower in the two-host lab
/// (100 × 4 KiB, four runs each way: 11.3–15.7 s against 9.3–11.9 s), where the guests' one CPU,
/// not the ACK wait, bounds many small messages.
package enum PipelineWindow {
    package static let messages = 2
}
