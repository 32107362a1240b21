// Placeholder until the BlueZ layer lands.
