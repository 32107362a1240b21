// Placeholder until the Transfer layer lands.
