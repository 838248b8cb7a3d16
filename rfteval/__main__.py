from rfteval.cli.app import main

main()
