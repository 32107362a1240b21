// BlueZ's public API speaks BluetoothModel's types (addresses, UUIDs, power states); a client of
// the BlueZ library product gets them with BlueZ.
@_exported import BluetoothModel
