enum BLETransferVersion {
    /// The release number; scripts/package-deb.sh reads it from this line for the package.
    static let number = "0.1.0"
    /// What `--version` prints: the release and the commit it was built from (BuildInfo is
    /// written before each build by the BuildInfo plugin, see scripts/build-info.sh).
    static let current = "\(number) (commit \(BuildInfo.commit))"
}
