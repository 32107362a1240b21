@testable import DBus
import PropertyBased

/// Random D-Bus values of every type BlueZ uses, nested through arrays, dictionaries, structs
/// and variants. Unix fds are left out (they compare by identity; fd tests are separate) and
/// doubles are never NaN (NaN != NaN).
enum RandomValues {
    indirect enum TypeShape {
        case basic(Character)
        case array(TypeShape)
        case dictionary(key: Character, value: TypeShape)
        case structure([TypeShape])
        case variant

        var signature: String {
            switch self {
            case .basic(let code): String(code)
            case .array(let element): "a" + element.signature
            case .dictionary(let key, let value): "a{" + String(key) + value.signature + "}"
            case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
            case .variant: "v"
            }
        }
    }

    static let basicCodes: [Character] = ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g"]

    /// A generator of argument lists (1 to 4 values), shrinking towards the values' children.
    static var arguments: Generator<[DBusValue], Shrink.None<[DBusValue]>> {
        Generator { rng in
            let count = Int.random(in: 1...4, using: &rng)
            return (0..<count).map { _ in value(depth: 4, using: &rng) }
        }
    }

    static func value(depth: Int, using rng: inout any SeededRandomNumberGenerator) -> DBusValue {
        value(of: shape(depth: depth, using: &rng), depth: depth, using: &rng)
    }

    static func shape(depth: Int, using rng: inout any SeededRandomNumberGenerator) -> TypeShape {
        let choice = depth <= 0 ? 0 : Int.random(in: 0..<10, using: &rng)
        switch choice {
        case 0...4: return .basic(basicCodes.randomElement(using: &rng)!)
        case 5, 6: return .array(shape(depth: depth - 1, using: &rng))
        case 7:
            return .dictionary(
                key: basicCodes.randomElement(using: &rng)!, value: shape(depth: depth - 1, using: &rng))
        case 8:
            return .structure((0..<Int.random(in: 1...3, using: &rng)).map { _ in shape(depth: depth - 1, using: &rng) })
        default: return .variant
        }
    }

    static func value(of shape: TypeShape, depth: Int, using rng: inout any SeededRandomNumberGenerator) -> DBusValue {
        switch shape {
        case .basic(let code): return basic(code, using: &rng)
        case .array(let element):
            let count = Int.random(in: 0...3, using: &rng)
            return .array(
                element: Signature(rawValue: element.signature)!,
                (0..<count).map { _ in value(of: element, depth: depth - 1, using: &rng) })
        case .dictionary(let key, let valueShape):
            let count = Int.random(in: 0...3, using: &rng)
            return .dictionary(
                key: Signature(rawValue: String(key))!, value: Signature(rawValue: valueShape.signature)!,
                (0..<count).map { _ in
                    DBusDictionaryEntry(
                        key: basic(key, using: &rng), value: value(of: valueShape, depth: depth - 1, using: &rng))
                })
        case .structure(let fields):
            return .structure(fields.map { value(of: $0, depth: depth - 1, using: &rng) })
        case .variant:
            return .variant(value(depth: max(0, depth - 1), using: &rng))
        }
    }

    static func basic(_ code: Character, using rng: inout any SeededRandomNumberGenerator) -> DBusValue {
        switch code {
        case "y": .byte(UInt8.random(in: .min ... .max, using: &rng))
        case "b": .boolean(Bool.random(using: &rng))
        case "n": .int16(Int16.random(in: .min ... .max, using: &rng))
        case "q": .uint16(UInt16.random(in: .min ... .max, using: &rng))
        case "i": .int32(Int32.random(in: .min ... .max, using: &rng))
        case "u": .uint32(UInt32.random(in: .min ... .max, using: &rng))
        case "x": .int64(Int64.random(in: .min ... .max, using: &rng))
        case "t": .uint64(UInt64.random(in: .min ... .max, using: &rng))
        case "d": .double(double(using: &rng))
        case "s": .string(string(using: &rng))
        case "o": .objectPath(objectPath(using: &rng))
        default: .signature(signature(using: &rng))
        }
    }

    static func double(using rng: inout any SeededRandomNumberGenerator) -> Double {
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: .infinity
        case 1: -.infinity
        case 2: -0.0
        case 3: .leastNonzeroMagnitude
        default:
            // Any bit pattern that is not a NaN: every finite value, subnormals included.
            { (candidate: Double) in candidate.isNaN ? 1.5 : candidate }(
                Double(bitPattern: UInt64.random(in: .min ... .max, using: &rng)))
        }
    }

    /// Any Unicode scalars except NUL (which D-Bus strings cannot hold): ASCII, BMP,
    /// noncharacters and supplementary planes.
    static func string(using rng: inout any SeededRandomNumberGenerator) -> String {
        let count = Int.random(in: 0...12, using: &rng)
        var scalars = String.UnicodeScalarView()
        for _ in 0..<count {
            let value: UInt32
            switch Int.random(in: 0..<5, using: &rng) {
            case 0: value = UInt32.random(in: 1...0x7F, using: &rng)
            case 1: value = UInt32.random(in: 0x80...0xD7FF, using: &rng)
            case 2: value = [0xFFFE, 0xFFFF, 0xFDD0, 0x1FFFF, 0x10FFFF].randomElement(using: &rng)!
            case 3: value = UInt32.random(in: 0xE000...0xFFFD, using: &rng)
            default: value = UInt32.random(in: 0x10000...0x10FFFF, using: &rng)
            }
            scalars.append(UnicodeScalar(value)!)
        }
        return String(scalars)
    }

    static func objectPath(using rng: inout any SeededRandomNumberGenerator) -> ObjectPath {
        let components = Int.random(in: 0...4, using: &rng)
        if components == 0 { return .root }
        let alphabet = Array("abcXYZ019_")
        var path = ""
        for _ in 0..<components {
            path += "/" + String((0..<Int.random(in: 1...6, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! })
        }
        return ObjectPath(rawValue: path)!
    }

    static func signature(using rng: inout any SeededRandomNumberGenerator) -> Signature {
        let count = Int.random(in: 0...3, using: &rng)
        let text = (0..<count).map { _ in shape(depth: 3, using: &rng).signature }.joined()
        return Signature(rawValue: text)!
    }
}
