import DBus

/// D-Bus names of the org.bluez API (BlueZ 5.66, doc/*-api.txt).
public enum BlueZInterface {
    public static let service = "org.bluez"
    public static let adapter = "org.bluez.Adapter1"
    public static let device = "org.bluez.Device1"
    public static let gattManager = "org.bluez.GattManager1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    public static let gattDescriptor = "org.bluez.GattDescriptor1"
    public static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    public static let advertisement = "org.bluez.LEAdvertisement1"

    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"
    static let busName = "org.freedesktop.DBus"
    static let busPath: ObjectPath = "/org/freedesktop/DBus"

    /// Interfaces every exported object carries; they say nothing about BlueZ's model.
    static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Introspectable",
        "org.freedesktop.DBus.Peer",
        "org.freedesktop.DBus.Properties",
    ]
}

/// Error names BlueZ uses (org.bluez.Error.*), for classification.
public enum BlueZErrorName {
    public static let inProgress = "org.bluez.Error.InProgress"
    public static let failed = "org.bluez.Error.Failed"
    public static let alreadyConnected = "org.bluez.Error.AlreadyConnected"
    public static let notConnected = "org.bluez.Error.NotConnected"
    public static let notReady = "org.bluez.Error.NotReady"
    public static let notPermitted = "org.bluez.Error.NotPermitted"
    public static let notSupported = "org.bluez.Error.NotSupported"
    public static let notAuthorized = "org.bluez.Error.NotAuthorized"
    public static let doesNotExist = "org.bluez.Error.DoesNotExist"
    public static let alreadyExists = "org.bluez.Error.AlreadyExists"
    public static let invalidArguments = "org.bluez.Error.InvalidArguments"
    public static let invalidOffset = "org.bluez.Error.InvalidOffset"
    public static let invalidValueLength = "org.bluez.Error.InvalidValueLength"
}
