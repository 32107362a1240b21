/// The transfer service's UUIDs unless overridden: Apple's "BTLE Transfer" sample's, to interoperate unconfigured.
package enum TransferUUIDs {
    package static let appleSampleService = try! BluetoothUUID("E20A39F4-73F5-4BC4-A12F-17D1AD07A961")
    package static let appleSampleCharacteristic = try! BluetoothUUID("08590F7E-DB05-467E-8757-72F6FAEB13D4")
    /// bletransfer's data characteristic, served beside Apple's when that carries indications
    /// (`CompatDelivery`): bletransfer centrals prefer it, so framed transfers keep full-speed
    /// notifications. The same UUID in any service (characteristics are scoped by their service).
    package static let framedCharacteristic = try! BluetoothUUID("3B1F6C52-8E0D-4A57-9C2B-61D4E7A09F35")
    /// Readable: the PSM (2 bytes, little-endian, as Apple's PSM characteristic) of the L2CAP channel serving
    /// version 2 (`channel`, wire-v2.md section 6); centrals not looking for it (Apple's sample, bleak) see no change.
    package static let channelPSMCharacteristic = try! BluetoothUUID("D533DDA4-55B7-4586-A003-91C8B75809F9")
    /// `bletransfer pair`'s (docs/pairing.md): advertised with a token and PSM in manufacturer data
    /// while two hosts look for each other; never served over GATT.
    package static let pairingService = try! BluetoothUUID("7C0F6A1E-5B2D-4E8F-9A3C-2D1B0E4F6A85")
}
