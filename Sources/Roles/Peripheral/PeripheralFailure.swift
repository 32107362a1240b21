import BlueZ
import Machines

/// Maps what BlueZ answers to registration into the failures a user sees.
enum PeripheralFailure {
    static func classify(_ error: any Error) -> RoleFailure {
        if let failure = error as? RoleFailure { return failure }
        let mapped = BluetoothError.from(error)
        guard let bluetooth = mapped as? BluetoothError else {
            return RoleFailure(.software, "unexpected failure: \(error)")
        }
        switch bluetooth {
        case .accessDenied: return RoleFailure(.permissionDenied, bluetooth.description)
        case .systemBusUnavailable, .bluetoothdNotRunning, .noAdapter, .objectGone, .deviceDisconnected, .timedOut,
             .notFound:
            return RoleFailure(.unavailable, bluetooth.description)
        case .unknownAdapter: return RoleFailure(.usage, bluetooth.description)
        case .bluez(let kind, let message):
            switch kind {
            case .notPermitted where message.lowercased().contains("maximum"):
                return RoleFailure(.unavailable,
                    "the adapter has no free advertising slot (another program is advertising): \(bluetooth.description)")
            case .notAuthorized: return RoleFailure(.permissionDenied, "bluetoothd refused: \(bluetooth.description)")
            case .alreadyExists:
                return RoleFailure(.software, "bluetoothd says our objects are already registered: \(bluetooth.description)")
            case .invalidLength:
                return RoleFailure(.usage, "the advertisement does not fit (shorten --name): \(bluetooth.description)")
            default: return RoleFailure(.unavailable, "bluetoothd refused to register: \(bluetooth.description)")
            }
        }
    }
}
