/// An optional property whose key is always encoded (`null` when nil, where synthesized `Codable` would leave it out):
/// scripts read `status --json` and rely on every key being present.
@propertyWrapper
public struct AlwaysEncoded<Wrapped> {
    public var wrappedValue: Wrapped?

    public init(wrappedValue: Wrapped?) {
        self.wrappedValue = wrappedValue
    }
}

extension AlwaysEncoded: Sendable where Wrapped: Sendable {}
extension AlwaysEncoded: Equatable where Wrapped: Equatable {}
extension AlwaysEncoded: Hashable where Wrapped: Hashable {}

extension AlwaysEncoded: Encodable where Wrapped: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wrappedValue)
    }
}

extension AlwaysEncoded: Decodable where Wrapped: Decodable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Wrapped.self)
    }
}

extension KeyedDecodingContainer {
    /// Chosen over the generic `decode` by synthesized `init(from:)`: a missing key reads as nil, as for an optional.
    func decode<Wrapped: Decodable>(_ type: AlwaysEncoded<Wrapped>.Type, forKey key: Key) throws -> AlwaysEncoded<Wrapped> {
        AlwaysEncoded(wrappedValue: try decodeIfPresent(Wrapped.self, forKey: key))
    }
}
