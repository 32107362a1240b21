/// The UUIDs the transfer service uses unless the user overrides them.
///
/// They are the values of Apple's "BTLE Transfer" sample, so a host running it interoperates
/// without configuration.
public enum TransferUUIDs {
    public static let appleSampleService = try! BluetoothUUID("E20A39F4-73F5-4BC4-A12F-17D1AD07A961")
    public static let appleSampleCharacteristic = try! BluetoothUUID("08590F7E-DB05-467E-8757-72F6FAEB13D4")
}
