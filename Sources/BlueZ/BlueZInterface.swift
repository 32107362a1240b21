import DBus

/// D-Bus names of the org.bluez API (BlueZ 5.66, doc/*-api.txt).
public enum BlueZInterface {
    public static let service = "org.bluez"
    public static let adapter = "org.bluez.Adapter1"
    public static let device = "org.bluez.Device1"
    public static let gattManager = "org.bluez.GattManager1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"
    public static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    public static let advertisement = "org.bluez.LEAdvertisement1"

    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"

    /// Interfaces every exported object carries; they say nothing about BlueZ's model.
    static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Introspectable",
        "org.freedesktop.DBus.Peer",
        "org.freedesktop.DBus.Properties",
    ]
}
