from tests.oauthserver.server import main

main()
