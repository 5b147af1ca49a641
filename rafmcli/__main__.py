from rafmcli.cli import main

main()
