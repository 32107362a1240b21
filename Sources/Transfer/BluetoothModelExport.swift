// The Bluetooth vocabulary (UUIDs, power states) is BluetoothModel's, below both Transfer and
// BlueZ; Transfer's users get it with Transfer. scripts/fuzz-transfer.sh compiles Transfer and
// BluetoothModel as one module and defines TRANSFER_SINGLE_MODULE.
#if !TRANSFER_SINGLE_MODULE
@_exported import BluetoothModel
#endif
