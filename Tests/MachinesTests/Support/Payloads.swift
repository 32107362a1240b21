import Transfer

// The machines' messages are held in memory here: no test of theirs reads a file.
extension ReceivedMessage {
    var payload: [UInt8] { body.inMemory ?? [] }
}

extension OutgoingMessage {
    var payload: [UInt8] { body.inMemory ?? [] }
}
