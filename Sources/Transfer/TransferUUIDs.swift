/// The UUIDs the transfer service uses unless the user overrides them.
///
/// They are the values of Apple's "BTLE Transfer" sample, so a host running it interoperates
/// without configuration.
package enum TransferUUIDs {
    package static let appleSampleService = try! BluetoothUUID("E20A39F4-73F5-4BC4-A12F-17D1AD07A961")
    package static let appleSampleCharacteristic = try! BluetoothUUID("08590F7E-DB05-467E-8757-72F6FAEB13D4")
    /// bletransfer's own data characteristic, served beside Apple's when Apple's carries
    /// indications (see `CompatDelivery`): bletransfer centrals prefer it, so framed transfers
    /// keep notifications at full speed while Apple-flow centrals get confirmed indications.
    /// The same UUID whatever service UUID the user chooses (characteristics are scoped by
    /// their service).
    package static let framedCharacteristic = try! BluetoothUUID("3B1F6C52-8E0D-4A57-9C2B-61D4E7A09F35")
    /// bletransfer's channel characteristic: readable, its value the PSM (2 bytes, little-endian,
    /// as Apple's L2CAP PSM characteristic carries it) of the LE credit-based L2CAP channel on
    /// which the sender serves framed version 2 (`channel`, docs/wire-v2.md section 6). Served
    /// in the transfer service beside the data characteristic; centrals that do not look for it
    /// (Apple's sample, bleak scripts) never see a difference.
    package static let channelPSMCharacteristic = try! BluetoothUUID("D533DDA4-55B7-4586-A003-91C8B75809F9")
    /// `bletransfer pair`'s service (docs/pairing.md): advertised, with a token and a PSM in
    /// manufacturer data, only while two hosts look for each other. Never served over GATT.
    package static let pairingService = try! BluetoothUUID("7C0F6A1E-5B2D-4E8F-9A3C-2D1B0E4F6A85")
}
