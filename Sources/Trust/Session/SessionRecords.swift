/// Opening the next record of an established session, as both session state machines do it.
enum SessionRecords {
    /// Opens `frame` with `opener` (nil until the handshake finished) and parses its content.
    /// The opener's counter advances, or it is closed after a failure, whichever happened.
    static func open(_ frame: Frame, with opener: inout RecordOpener?)
        throws(SecureSessionError) -> (record: Record, message: RecordMessage) {
        guard frame.type != .handshake else { throw .protocolViolation("handshake frame after the handshake") }
        guard var current = opener else { throw .protocolViolation("record before the handshake finished") }
        defer { opener = current }
        let record: Record
        do { record = try current.open(frame) } catch { throw SecureSessionError(error) }
        do { return (record, try RecordMessage(parsing: record)) } catch { throw SecureSessionError(error) }
    }

    /// The frames `bytes` completes in `reader`; a malformed one fails the session.
    static func frames(_ bytes: some Collection<UInt8>, in reader: inout FrameReader) throws(SecureSessionError) -> [Frame] {
        do { return try reader.append(bytes) } catch { throw SecureSessionError(error) }
    }
}
